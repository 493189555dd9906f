"""kvcore.testing.configure_test_environment: the environment every kvcore test suite
(core, plugins, third-party spec plugins) runs in."""

from __future__ import annotations

import importlib.util
import os

import pytest

from kvcore import testing


def test_sets_the_switches_when_unset(monkeypatch):
    monkeypatch.delenv("KVCORE_CHECK_INVARIANTS", raising=False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name == "triton" else None)
    testing.configure_test_environment()
    assert os.environ["KVCORE_CHECK_INVARIANTS"] == "1"
    assert os.environ["TRITON_INTERPRET"] == "1"


def test_keeps_what_the_user_set(monkeypatch):
    monkeypatch.setenv("KVCORE_CHECK_INVARIANTS", "all")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name == "triton" else None)
    testing.configure_test_environment()
    assert os.environ["KVCORE_CHECK_INVARIANTS"] == "all"
    assert os.environ["TRITON_INTERPRET"] == "0"


def test_without_triton_the_interpreter_is_off(monkeypatch):
    # with TRITON_INTERPRET=1 and no triton the dispatchers would pick a kernel that
    # cannot import; "0" makes them pick the torch references
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    testing.configure_test_environment()
    assert os.environ["TRITON_INTERPRET"] == "0"


def test_hypothesis_has_no_deadline():
    hypothesis = pytest.importorskip("hypothesis")
    testing.configure_test_environment()
    assert hypothesis.settings().deadline is None
    assert hypothesis.settings.get_profile(testing.HYPOTHESIS_PROFILE).deadline is None
