"""The Ray executor on a small local cluster (2 CPUs, started here, no dashboard): the same records as the
local executor, failures retried then reported while other units go on."""

from __future__ import annotations

import json

import pytest
import torch

import engine_fakes
from canvaslab.prompts import builtin_prompts
from canvaslab.studies.batch_size import BatchStudySettings
from canvaslab.studies.batch_size.study import BatchSizeStudy, model_plan
from canvaslab.studies.engine import run_study
from canvaslab.studies.op_scan import OPS, OpScanStudy

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray.cloudpickle.register_pickle_by_value(engine_fakes)  # the test's study travels by value
    yield
    ray.shutdown()


@pytest.fixture
def one_thread():
    """Ray gives each 1-CPU worker one torch thread; the local run uses as many, since a CPU reduction may
    be split by thread count (the environment in each record's worker info names it)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _stored(folder) -> dict:
    records = {}
    for path in sorted((folder / "store" / "records").glob("*.json")):
        stored = json.loads(path.read_text())
        records[stored["unit"]] = stored["record"]
    return records


def _both(study_factory, tmp_path, workers=2):
    local_view, local = run_study(study_factory(), tmp_path / "local")
    ray_view, remote = run_study(study_factory(), tmp_path / "ray", executor="ray", workers=workers)
    assert (local.ran, remote.ran) == (local.total, remote.total) and not remote.failed
    return _stored(tmp_path / "local"), _stored(tmp_path / "ray"), local_view, ray_view


def test_op_scan_on_ray_gives_the_local_records(cluster, one_thread, tiny, tmp_path):
    def study():
        return OpScanStudy(model_plan(tiny), ["stock"], [1, 2], loaded=tiny)

    local, remote, local_view, ray_view = _both(study, tmp_path)
    assert local == remote and len(remote) == len(OPS)
    assert local_view["scans"] == ray_view["scans"]


def test_batch_study_on_ray_gives_the_local_records_and_names_the_device(cluster, one_thread, tiny, tmp_path):
    settings = BatchStudySettings(batch_sizes=[1, 2], repeat_control="same-process",
                                  generation={"max_denoising_steps": 2})

    def study():
        return BatchSizeStudy(model_plan(tiny), builtin_prompts(2), settings, loaded=tiny)

    local, remote, local_view, ray_view = _both(study, tmp_path)
    assert local == remote and set(remote) == {"builtin-0", "builtin-1"}
    assert all(record["device"] == "cpu" for record in remote.values())
    assert local_view["summary"] == ray_view["summary"] and local_view["runs"] == ray_view["runs"]
    worker = json.loads(next((tmp_path / "ray" / "store" / "records").glob("*.json")).read_text())["worker"]
    assert worker["environment"]["torch_threads"] == 1 and worker["pid"] and worker["host"]


def test_a_failing_unit_on_ray_is_retried_then_reported_and_the_others_go_on(cluster, tmp_path):
    log = tmp_path / "log"
    view, outcome = run_study(engine_fakes.Squares(n=5, log=str(log), fail={"u/2": -1}), tmp_path / "s",
                              executor="ray", workers=2, retries=1)
    assert outcome.ran == 4 and list(outcome.failed) == ["u/2"] and "planted failure" in outcome.failed["u/2"]
    assert [json.loads(line)["unit"] for line in log.read_text().splitlines()].count("u/2") == 2
    assert view["units"] == ["u/0", "u/1", "u/3", "u/4"]
