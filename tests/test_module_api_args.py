"""The public names of kvcore's other modules raise a KVCoreError subclass on bad
arguments, as kvcore.__all__ does (tests/test_public_api_args.py) and kvcore.sim /
kvcore.routing do (tests/sim/test_sim_public_api_args.py).

Each name of each module's ``__all__`` (names exported later are covered too) is called
with every required parameter and a random choice of the optional ones, each given a
wrong type or value; only success or a KVCoreError may come out.  Found when this test
was written: 54 names raised TypeError, AttributeError or KeyError
(``kvcore.plugins.register(3)`` registered an int as a plugin,
``BlockPool(10**400)``, ``block_tables([], as_tensor=True, device=[1])``,
``serving.pick({"a": 1})``, ``sim_judge(gpu=5)``, ``cdiv({}, 2)`` ...).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kvcore_api_fuzz import BAD, FUZZ_SETTINGS, call_badly, module_targets

from kvcore.errors import KVCoreError

MODULES = ["kvcore.serving", "kvcore.plan_serving", "kvcore.specs", "kvcore.quant",
           "kvcore.dtypes", "kvcore.kv_cache_config", "kvcore.registry",
           "kvcore.models", "kvcore.deploy.budget", "kvcore.deploy.ceilings",
           "kvcore.deploy.engines", "kvcore.deploy.gpus", "kvcore.deploy.sweep",
           "kvcore.deploy.weights", "kvcore.runtime", "kvcore.plugins"]
#: not calls on user input: an Enum (called with several values it is Enum's functional
#: API, a new enum), a call that forgets every plugin (it would undo the session's
#: registrations), and classes whose signature is ``*args, **kw`` forwarded to a base
#: class covered here (KVCacheCoordinator, SingleTypeManager)
SKIP = {"kvcore.quant.KVQuantMode", "kvcore.plugins.reload_plugins",
        "kvcore.runtime.UnitaryCoordinator", "kvcore.runtime.SlidingWindowManager",
        "kvcore.runtime.ChunkedLocalAttentionManager",
        "kvcore.runtime.SinkFullAttentionManager"}

TARGETS = module_targets(MODULES, SKIP)


@pytest.fixture(autouse=True, scope="module")
def _in_a_scratch_dir(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A call given a str as a path writes nothing into the checkout."""
    import os

    here = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("api-args"))
    yield
    os.chdir(here)


def test_targets_found() -> None:
    ids = {p.id for p in TARGETS}
    assert {"kvcore.runtime.BlockPool", "kvcore.runtime.make_coordinator",
            "kvcore.plugins.register", "kvcore.serving.pick",
            "kvcore.plan_serving.sim_judge", "kvcore.deploy.ceilings.vllm_layout",
            "kvcore.specs.cdiv"} <= ids
    assert len(ids) > 80


@pytest.mark.parametrize("fn", TARGETS)
@settings(max_examples=30, **FUZZ_SETTINGS)
@given(values=st.lists(BAD, min_size=1, max_size=8),
       which=st.lists(st.booleans(), min_size=1, max_size=8))
def test_bad_arguments_raise_kvcore_errors(fn: Any, values: list[Any],
                                           which: list[bool]) -> None:
    call_badly(fn, values, which)


# ---- the cases found, with the message each now gives ------------------------------------

def test_register_refuses_an_object_without_hooks_and_registers_nothing() -> None:
    from kvcore import plugins

    before = [p.name for p in plugins.list_plugins()]
    for obj, name, match in [(3, None, "implements no kvcore_"),
                             (None, None, "implements no kvcore_"),
                             (object(), 5, "non-empty str"),
                             (object(), "", "non-empty str")]:
        with pytest.raises(KVCoreError, match=match):
            plugins.register(obj, name=name)
    assert [p.name for p in plugins.list_plugins()] == before


def test_block_pool_huge_and_numpy_counts() -> None:
    np = pytest.importorskip("numpy")
    from kvcore.runtime import BlockPool

    with pytest.raises(KVCoreError, match="num_blocks"):
        BlockPool(10 ** 400)
    assert BlockPool(np.int64(10)).num_usable_blocks == 9


def test_kernel_tables_bad_device_names_it() -> None:
    pytest.importorskip("torch")
    from kvcore.runtime import block_tables

    with pytest.raises(KVCoreError, match="device"):
        block_tables([[1, 2]], as_tensor=True, device=[1])
    with pytest.raises(KVCoreError, match="device"):
        block_tables([[1, 2]], as_tensor=True, device="1.5B")
    t = block_tables([[1, 2]], as_tensor=True, device="cpu")
    assert t.tolist() == [[1, 2]]


def test_cdiv_refuses_non_ints_and_zero() -> None:
    from kvcore.specs import cdiv

    assert cdiv(17, 16) == 2 and cdiv(0, 16) == 0
    for a, b in [(1.5, 2), (3, 0), (-1, 2), (True, 2)]:
        with pytest.raises(KVCoreError):
            cdiv(a, b)
