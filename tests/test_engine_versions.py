"""``--engine vllm==X.Y[.Z]`` accepts released vLLM versions kvcore knows, nothing else
(leftover T8).

The rule: the version must be one vLLM released (PyPI's list, ``pip index versions
vllm``, 2026-12, written out in tests/test_engines.py) inside kvcore's profiles (0.4.0 to
0.32.0); ``X.Y`` is ``X.Y.0`` as pip compares; post releases and local labels are the
release; a nightly or release candidate of a version in that range is the release it
precedes, or the last release before it when vLLM never published that version.
Anything else -- a version never released, one released without a profile
(0.3.3, 0.33.0), a malformed spec, another engine, a range -- is a ConfigError naming
``--engine``, the value and the valid range, and in the CLI one line, exit 2.
Generated: versions drawn near and inside the released ones, and spellings of each.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_engines import PYPI_RELEASES

from kvcore.cli import main as cli_main
from kvcore.deploy.engines import PROFILES, get_engine
from kvcore.errors import ConfigError

SETTINGS = settings(max_examples=80, deadline=None, derandomize=True)


def _key(text):
    rel, _, post = text.partition(".post")
    nums = [int(x) for x in rel.split(".")]
    while len(nums) > 1 and nums[-1] == 0:
        nums.pop()
    return tuple(nums), int(post) if post else -1


RELEASED = {_key(r) for r in PYPI_RELEASES}
#: released by vLLM but before / after kvcore's profiles (PyPI)
RELEASED_WITHOUT_PROFILE = ["0.3.3", "0.3.0", "0.2.7", "0.1.7", "0.33.0", "0.34.0"]


def _refused(spec):
    with pytest.raises(ConfigError) as exc:
        get_engine(spec)
    msg = str(exc.value)
    assert msg.startswith("--engine ") and repr(spec) in msg, msg
    assert "0.4.0 to 0.32.0" in msg and exc.value.extra.get("field") == "engine"
    return msg


@SETTINGS
@given(st.sampled_from(PYPI_RELEASES), st.sampled_from(["", "v"]),
       st.sampled_from(["", "+cu126", "+cpu"]), st.sampled_from(["", " "]))
def test_every_release_is_taken_in_its_spellings(release, v, local, space):
    p = get_engine(f"vllm=={space}{v}{release}{local}")
    three = tuple(int(x) for x in (release.split(".post")[0].split(".") + ["0", "0"])[:3])
    covering = [q for q in PROFILES if q.first <= three <= q.last]
    assert [p.name] == [q.name for q in covering] and p.version == three


@SETTINGS
@given(st.integers(0, 1), st.integers(0, 40), st.integers(0, 12),
       st.one_of(st.none(), st.integers(0, 3)))
def test_a_version_vllm_never_released_is_refused(major, minor, patch, fourth):
    text = f"{major}.{minor}.{patch}" + ("" if fourth is None else f".{fourth}")
    if _key(text) in RELEASED:
        get_engine(f"vllm=={text}")  # the rule: taken
        return
    msg = _refused(f"vllm=={text}")
    assert "nearest known" in msg


@pytest.mark.parametrize("release", RELEASED_WITHOUT_PROFILE)
def test_a_release_without_a_profile_is_refused(release):
    _refused(f"vllm=={release}")


@SETTINGS
@given(st.sampled_from(["vllm==", "vllm==abc", "sglang==1.0", "vllm>=0.10", "vllm~=0.10",
                        "vllm==0.10.*", "vllm==0.7.1.devx", "vllm==0.10.1rcx", "vllm",
                        "vllm=0.10.1", "==0.10.1", "vllm==0..1", "vllm==0.10.1 0.9",
                        "tensorrt-llm==0.10", "vllm==0.10.1,<1"]),
       st.sampled_from(["", " "]))
def test_a_malformed_spec_is_refused(spec, pad):
    _refused(pad + spec)


#: digits that are not ASCII (Python's \d matches them): Arabic-Indic, full-width,
#: Devanagari, Bengali
OTHER_DIGITS = ["٠١٢٣٤٥٦٧٨٩", "０１２３４５６７８９", "०१२३४५६७८९", "০১২৩৪৫৬৭৮৯"]


@SETTINGS
@given(st.sampled_from(PYPI_RELEASES), st.sampled_from(OTHER_DIGITS),
       st.sampled_from(["", "garbage", ",0.9", ".", ".-1", "-1", " 0.9", "*"]))
def test_tester_t4_trailing_text_and_other_digits_are_refused(release, digits, tail):
    """tester T4: 'vllm==0.8.0garbage', 'vllm==0.32.-1', 'vllm==0.٣٢' planned under a
    profile; the rule: only ASCII X.Y[.Z] (+ .postN / +local) names a release."""
    if tail:
        _refused(f"vllm=={release}{tail}")
    spelled = "".join(digits[int(c)] if c.isdigit() else c for c in release)
    _refused(f"vllm=={spelled}")


@pytest.mark.parametrize("cmd", [["plan", "llama-3.1-8b", "--gpu", "H100"],
                                 ["plan", "llama-3.1-8b", "--gpu", "H100", "--overhead",
                                  "2GiB"],
                                 ["plan", "llama-3.1-8b", "--kv-cache-memory", "20GiB"]])
@pytest.mark.parametrize("spec", ["vllm==0.32.99", "vllm==", "vllm==abc", "sglang==1.0",
                                  "vllm>=0.10", "vllm==0.33.0"])
def test_cli_refuses_in_one_line(capsys, cmd, spec):
    assert cli_main([*cmd, "--engine", spec]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "--engine" in err and spec in err and "0.4.0 to 0.32.0" in err


def test_cli_takes_a_release(capsys):
    assert cli_main(["plan", "llama-3.1-8b", "--gpu", "H100", "--engine",
                     "vllm==0.10.1.1"]) == 0


# nightlies and release candidates (a v15 accuracy row ran vLLM 0.7.4.dev181+gf35f8e22)
PROFILED = sorted((r for r in PYPI_RELEASES if ".post" not in r and r.count(".") == 2
                   and (0, 4, 0) <= tuple(map(int, r.split("."))) <= (0, 32, 0)),
                  key=lambda r: tuple(map(int, r.split("."))))


@SETTINGS
@given(st.sampled_from(PROFILED), st.sampled_from(["rc1", ".rc2", "a1", "b3", ".dev181",
                                                   "rc1.dev4", ".dev7+gf35f8e22"]))
def test_a_pre_release_of_a_release_plans_as_that_release(release, suffix):
    # PEP 440: X.Y.Z{rc,a,b}N / .devN precede X.Y.Z; the code line is X.Y.Z's
    want = get_engine(f"vllm=={release}")
    got = get_engine(f"vllm=={release}{suffix}")
    assert (got.name, got.release) == (want.name, want.release)


@SETTINGS
@given(st.sampled_from(PROFILED[:-1]), st.integers(1, 9))
def test_a_nightly_of_a_never_released_version_plans_as_the_release_before(release,
                                                                           bump):
    # 0.7.4.dev181 (0.7.4 was never released: 0.7.3 came before it, 0.8.0 after)
    x, y, z = map(int, release.split("."))
    nxt = PROFILED[PROFILED.index(release) + 1]
    cand = f"{x}.{y}.{z + bump}"
    if _key(cand) in RELEASED or _key(cand) >= _key(nxt):
        return  # a real release, or past the next one: not this case
    _refused(f"vllm=={cand}")  # the bare version is not a release
    got = get_engine(f"vllm=={cand}.dev181+gf35f8e22")
    want = get_engine(f"vllm=={release}")
    assert (got.name, got.release) == (want.name, want.release)


@pytest.mark.parametrize("spec", ["vllm==0.33.0rc1", "vllm==0.3.3.dev1", "vllm==0.32.99.dev1",
                                  "vllm==0.40.0.dev0"])
def test_a_pre_release_outside_the_profiles_is_refused(spec):
    _refused(spec)
