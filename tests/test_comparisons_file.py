"""comparisons.json: the claims' comparisons computed once by collect, read back by verdicts to the
same verdicts.json byte for byte (timestep_lab.evidence.comparisons,
timestep_lab.workflow.comparisons_file)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
from synthetic_results import SYN_BASE, make_results

from timestep_lab.artifacts.io import ArtifactError
from timestep_lab.claims import CLAIMS
from timestep_lab.evidence.comparisons import claim_comparisons, comparison_key, decode, encode
from timestep_lab.workflow.collect import load_tables, write_verdicts
from timestep_lab.workflow.comparisons_file import COMPARISONS_FORMAT, read_comparisons, stored_compare, write_comparisons


def _strict(text: str):
    """json.loads refusing NaN/Infinity, as a strict JSON reader does."""
    def refuse(name):
        raise ValueError(f"not strict JSON: {name}")
    return json.loads(text, parse_constant=refuse)


def test_nonfinite_values_survive_the_round_trip_as_strict_json():
    obj = {"a": math.nan, "b": [math.inf, -math.inf, 1.5, (2, np.float64(math.inf))], "c": {"d": np.int64(3), "e": None},
           "f": "nan", "g": {"$float": "x"}}
    text = json.dumps(encode(obj), allow_nan=False)
    back = decode(_strict(text))
    assert math.isnan(back["a"]) and back["b"][:3] == [math.inf, -math.inf, 1.5]
    assert back["b"][3] == [2, math.inf] and back["c"] == {"d": 3, "e": None}
    assert back["f"] == "nan" and back["g"] == {"$float": "x"}  # only the exact tag decodes


@pytest.fixture(scope="module")
def syn(tmp_path_factory):
    return make_results(tmp_path_factory.mktemp("syn"))


def test_verdicts_from_the_stored_comparisons_equal_the_computed_ones_byte_for_byte(syn, tmp_path):
    p = syn.paths
    metrics = load_tables(p["metrics_csv"], p["runs_csv"])
    comps = claim_comparisons(metrics, base=SYN_BASE)
    fid_claims = {c.group for c in CLAIMS if c.kind == "fid"}
    assert comps and {c["group"] for c in comps.values()} <= fid_claims
    # two claims of one group against one baseline share one comparison
    assert len(comps) < sum(1 for c in CLAIMS if c.kind == "fid")
    stored = tmp_path / "comparisons.json"
    write_comparisons(stored, comps, study="syn")
    data = _strict(stored.read_text())
    assert data["format"] == COMPARISONS_FORMAT and set(data["comparisons"]) == set(comps)
    assert '{"$float": "nan"}' in json.dumps(data)  # the values strict JSON cannot carry are there, tagged
    kw = dict(runs_csv=p["runs_csv"], interference=p["interference_control"], consistency=p["consistency"],
              base=SYN_BASE, study="syn")
    write_verdicts(p["metrics_csv"], str(tmp_path / "computed.json"), **kw)
    write_verdicts(p["metrics_csv"], str(tmp_path / "read.json"), comparisons=str(stored), **kw)
    assert (tmp_path / "read.json").read_bytes() == (tmp_path / "computed.json").read_bytes()
    # the stored numbers are the ones read: change one and the verdicts follow it
    key = next(k for k, c in comps.items() if c["comparisons"])
    arm = next(iter(comps[key]["comparisons"]))
    data["comparisons"][key]["comparisons"][arm]["diff"] = 12345.5
    stored.write_text(json.dumps(data))
    read = json.loads(write_verdicts(p["metrics_csv"], str(tmp_path / "edited.json"), comparisons=str(stored),
                                     **kw) and (tmp_path / "edited.json").read_text())
    assert any(c.get("diff") == 12345.5 for c in read["claims"])


def test_a_missing_or_foreign_comparisons_file_is_one_error_naming_it(syn, tmp_path):
    compare = stored_compare({}, "results/x/comparisons.json")
    with pytest.raises(ArtifactError, match=r"results/x/comparisons.json: no comparison of sampler_comparison"):
        compare(None, "sampler_comparison", {"sampler": "uniform"})
    bad = tmp_path / "comparisons.json"
    bad.write_text(json.dumps({"format": "timestep_lab.verdicts/2", "claims": []}))
    with pytest.raises(ArtifactError, match="comparisons.json: not a comparisons file"):
        read_comparisons(bad)
    bad.write_text(json.dumps({"format": COMPARISONS_FORMAT, "comparisons": [1, 2]}))
    with pytest.raises(ArtifactError, match="'comparisons' is not an object"):
        read_comparisons(bad)
    assert comparison_key("g", {"b": 1, "a": "x"}) == comparison_key("g", {"a": "x", "b": 1})
    # through the command: one error line, no traceback
    p = syn.paths
    r = subprocess.run([sys.executable, "-m", "timestep_lab", "verdicts", f"--metrics-csv={p['metrics_csv']}",
                        f"--comparisons={bad}", f"--out={tmp_path / 'v.json'}"], capture_output=True, text=True)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert [ln for ln in r.stderr.splitlines() if ln.startswith("error:")] == \
        [f"error: {bad}: 'comparisons' is not an object of comparisons; the collect job writes it"]
