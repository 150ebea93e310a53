"""op-scan: stock mode shows this CPU's batch-variant op; invariant mode has one class per op."""

from canvaslab.cli.main import main
from canvaslab.studies.op_scan import OPS, scan_ops
from canvaslab.io import read_json


def test_invariant_mode_has_one_class_per_op_and_stock_shows_the_variant_one(tiny):
    stock = scan_ops(tiny, [1, 2, 3, 4, 8], "stock")
    invariant = scan_ops(tiny, [1, 2, 3, 4, 8], "invariant")
    assert set(stock["ops"]) == set(invariant["ops"]) and len(stock["ops"]) == len(OPS) == 20
    assert all(op["classes"] == [[1, 2, 3, 4, 8]] for op in invariant["ops"].values())
    # on x86 the float32 GEMM with M = batch rows (the last prompt token) depends on batch size
    assert not stock["ops"]["encoder k_proj, last prompt token"]["invariant"]


def test_cli_writes_json_with_both_modes(tmp_path, capsys):
    main(["op-scan", "--batch-sizes", "1,2,4", "--out", str(tmp_path)])
    result = read_json(tmp_path / "op_scan.json")
    assert [scan["mode"] for scan in result["scans"]] == ["stock", "invariant"]
    assert "aten.mm" in result["replaced_ops"]["invariant"]
    assert "op scan" in capsys.readouterr().out
