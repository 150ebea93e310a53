"""What the code sandbox costs per probe: two bubblewrap jails against one unprotected interpreter.

For each probe (every code-synthesis task and the first ``--human-eval`` HumanEval tasks) the reference
solution is scored through ``run_code_tests`` (the candidate's jail, the tests' jail, the plain-data
link) and, alternating with it so drift and other load hit both alike, run the way an unprotected
harness would: one ``python -I -S`` subprocess executing the solution and then the tests. Reported:
the median over probes of each, their difference (the sandbox's overhead per probe) and ratio, and the
floor: a one-line function with one one-line test. Timings are wall clock and include starting the
processes; the load average before and after is recorded, as other work on the machine slows both.
Needs bubblewrap (the sandbox's jails) and the ``probes`` extra (HumanEval).

    python benchmarks/sandbox_overhead.py --out OUT/cpu_sandbox_overhead.json
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from canvaslab.environment import environment_fingerprint, record_result
from canvaslab.io import write_json_atomic
from canvaslab.scoring.probes import load_regime, program_code, run_code_tests
from canvaslab.scoring.sandbox import require_isolation, run_tests


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--code-synthesis", type=int, default=None,
                        help="how many code-synthesis tasks (from the first; default all 55)")
    parser.add_argument("--human-eval", type=int, default=164, help="how many HumanEval tasks (from the first)")
    parser.add_argument("--repeats", type=int, default=3, help="timings per probe and side; the median is kept")
    parser.add_argument("--floor-repeats", type=int, default=10, help="timings of the one-line floor")
    parser.add_argument("--out", type=Path, required=True, help="JSON result file")
    return parser.parse_args()


def timed(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def unprotected(program: str, tests: str) -> None:
    completed = subprocess.run([sys.executable, "-I", "-S", "-c", f"{program}\n\n{tests}"], capture_output=True,
                               timeout=60, check=False)
    if completed.returncode != 0:
        raise RuntimeError(f"the reference failed without the sandbox: {completed.stderr[-300:]!r}")


def sandboxed(probe, answer: str) -> None:
    result = run_code_tests(probe, answer)
    if not result.passed:
        raise RuntimeError(f"{probe.probe_id}: the reference failed in the sandbox: {result.failure}")


def main() -> None:
    args = parse_args()
    isolation = require_isolation()
    probes = load_regime("code_synthesis")[: args.code_synthesis] + load_regime("code_completion")[: args.human_eval]
    load_before = os.getloadavg()
    floor = [timed(lambda: run_tests("def f():\n    return 1\n", "f", "assert f() == 1"))
             for _ in range(args.floor_repeats)]
    rows = []
    for probe in probes:
        answer = f"```python\n{probe.reference['canonical_solution']}\n```"
        program = program_code(probe, answer)
        sides = {"sandbox": [], "unprotected": []}
        for _ in range(args.repeats):
            sides["sandbox"].append(timed(lambda: sandboxed(probe, answer)))
            sides["unprotected"].append(timed(lambda: unprotected(program, probe.reference["tests"])))
        rows.append({"probe_id": probe.probe_id, **{side: statistics.median(times) for side, times in sides.items()}})
    sandbox_s = statistics.median(row["sandbox"] for row in rows)
    unprotected_s = statistics.median(row["unprotected"] for row in rows)
    overheads = [row["sandbox"] - row["unprotected"] for row in rows]
    payload = {
        "what": "seconds per probe: scoring a reference solution in the sandbox vs one unprotected python -I -S",
        "command": " ".join(["python", "benchmarks/sandbox_overhead.py", *sys.argv[1:]]),
        "probes": len(rows),
        "repeats": args.repeats,
        "median_sandbox_s": round(sandbox_s, 4),
        "median_unprotected_s": round(unprotected_s, 4),
        "median_overhead_s": round(statistics.median(overheads), 4),
        "ratio_of_medians": round(sandbox_s / unprotected_s, 2),
        "floor_one_line_function_median_s": round(statistics.median(floor), 4),
        "per_probe": [{key: round(value, 4) if isinstance(value, float) else value for key, value in row.items()}
                      for row in rows],
        "environment": environment_fingerprint(
            bwrap=isolation.bwrap_version, jail_python=f"{isolation.python} {isolation.python_version}",
            as_root=isolation.setpriv is not None, kernel=platform.release(), cpu_count=os.cpu_count(),
            load_average_before=[round(x, 2) for x in load_before],
            load_average_after=[round(x, 2) for x in os.getloadavg()],
        ),
    }
    write_json_atomic(args.out, payload)
    record_result(args.out, shows="seconds per probe to score a reference solution in the code sandbox (two "
                  "bubblewrap jails) against one unprotected python -I -S; the overhead per probe",
                  environment=payload["environment"])
    overhead_ms, floor_ms = statistics.median(overheads) * 1000, statistics.median(floor) * 1000
    print(f"{len(rows)} probes: sandbox {sandbox_s * 1000:.0f} ms, unprotected {unprotected_s * 1000:.0f} ms per probe "
          f"(median overhead {overhead_ms:.0f} ms); floor {floor_ms:.0f} ms; load {load_before[0]:.1f} -> "
          f"{os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
