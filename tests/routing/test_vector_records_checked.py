"""tester T17: a routing vector's records are checked when it is loaded.

The rule: a record is an object whose op is events or query, with only that op's keys;
the config has only its keys; a query's block_hashes are the hashes of its token_ids
(under the vector's hash and hash block size).  A misspelled op, an unknown key or a
query whose tokens were changed is a ConfigError naming the record, never a vector that
"passes" because a query was skipped.  Generated: which record is changed and how.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcore.errors import ConfigError
from kvcore.routing import vectors

DATA = Path(__file__).resolve().parents[1] / "data" / "routing_vectors"
FULL = json.loads((DATA / "full.json").read_text())
N = len(FULL["records"])


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.integers(0, N - 1), st.sampled_from(["op", "key", "tokens"]),
       st.sampled_from(["qurey", "event", "", "QUERY", None, 3]))
def test_a_changed_record_is_refused_naming_it(i, how, op):
    d = copy.deepcopy(FULL)
    rec = d["records"][i]
    if how == "op":
        rec["op"] = op
    elif how == "key":
        rec["extra"] = 1
    else:
        if rec["op"] != "query" or not rec["block_hashes"]:
            return  # only a query with a full block carries hashes of its tokens
        rec["token_ids"] = [t + 1 for t in rec["token_ids"]]
    with pytest.raises(ConfigError) as e:
        vectors.load(d)
    assert f"records[{i}]" in str(e.value)


def test_an_unknown_config_key_is_refused():
    d = copy.deepcopy(FULL)
    d["config"]["foo"] = 1
    with pytest.raises(ConfigError) as e:
        vectors.load(d)
    assert "foo" in str(e.value) and "config" in str(e.value)
