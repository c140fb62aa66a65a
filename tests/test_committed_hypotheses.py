"""Every committed frontier record names hypothesis files that exist, and the tree holds one copy
of each text: cells with the same hypotheses (the exact engines, often both batch sizes) name
one file (``frontier_engines.write_record``)."""

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parent.parent / "results"


def test_each_records_hypotheses_exist_once():
    records = sorted(RESULTS.glob("**/models/*.json"))
    assert len(records) >= 40
    for path in records:
        record = json.loads(path.read_text())
        out = path.parent.parent
        files = {cell["hypotheses_file"] for engine in record.get("engines", {}).values()
                 for cell in engine.get("batch", {}).values() if "hypotheses_file" in cell}
        texts = [(out / f).read_bytes() for f in sorted(files)]
        assert len(set(texts)) == len(texts), path
        assert not {f"hyp/{p.name}" for p in out.glob(f"hyp/{record['model']}.*")} - files, path
