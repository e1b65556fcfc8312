"""The fleet demo under `detect` and under `wait_die` (issue 26), one run each with the same
seed and settings, written as the section "## Fleet demo: detect vs wait_die" of
bench/REPORT.md (replaced if there, else appended; bench_report.rs keeps it, as it keeps
every section from "## Friendly clients" on).

    python3 bench/fleet.py                    # the demo's defaults: 4 + 4 agents x 30 edits
    python3 bench/fleet.py --out /tmp/R.md -- --edits 10   # after --: flags for run.py

Each run is `bash scripts/demo.sh --policy P ...` (which sets up what it needs); the numbers
are read from its final table: edits made, deaths (the DIE verdicts and DIED events the agents counted),
elapsed wall time, and whether every agent finished. A benchmark, not a test: it reports the
targets (deaths per committed edit at least 5x fewer under detect, edits per second no
lower, every run finished with nothing lost) as met or missed and exits 0 unless a run failed
to produce its table.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADING = "## Fleet demo: detect vs wait_die"
POLICIES = ("wait_die", "detect")


def row(table: str, label: str) -> list[str]:
    """The cells of one row of run.py's table (Python/Node without Klock, then with)."""
    for line in table.splitlines():
        if line.startswith(label):
            return re.split(r"\s{2,}", line[len(label) :].strip())
    raise ValueError(f"no row {label!r} in the demo's output:\n{table}")


def run(policy: str, extra: list[str]) -> dict[str, float | str]:
    command = ["bash", os.path.join(ROOT, "scripts", "demo.sh"), "--policy", policy, *extra]
    print(f"fleet: {' '.join(command)}", file=sys.stderr, flush=True)
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    out = done.stdout
    try:
        made = [int(c) for c in row(out, "edits made")[2:]]
        deaths = [int(c) for c in row(out, "deaths (DIE)")[2:]]
        lost = [int(c) for c in row(out, "edits lost")[2:]]
        finished = row(out, "finished (no deadlock)")[2:]
        elapsed = float(row(out, "elapsed")[2].split()[0])
    except ValueError as e:
        sys.exit(
            f"fleet: the {policy} run gave no table (exit {done.returncode}): {e}\n{done.stderr[-2000:]}"
        )
    return {
        "policy": policy,
        "python_edits": made[0],
        "node_edits": made[1],
        "python_deaths": deaths[0],
        "node_deaths": deaths[1],
        "lost": sum(lost),
        "finished": "yes" if finished == ["yes", "yes"] else "NO",
        "elapsed": elapsed,
        "exit": done.returncode,
    }


def per_edit(r: dict[str, float | str]) -> float:
    edits = float(r["python_edits"]) + float(r["node_edits"])
    return (float(r["python_deaths"]) + float(r["node_deaths"])) / max(1.0, edits)


def throughput(r: dict[str, float | str]) -> float:
    return (float(r["python_edits"]) + float(r["node_edits"])) / max(1e-9, float(r["elapsed"]))


def section(runs: list[dict[str, float | str]], extra: list[str]) -> str:
    by = {str(r["policy"]): r for r in runs}
    wd, dt = by["wait_die"], by["detect"]
    fewer = per_edit(wd) / per_edit(dt) if per_edit(dt) > 0 else float("inf")
    met = lambda ok: "met" if ok else "**missed**"  # noqa: E731
    flags = " ".join(extra) or "(the demo's defaults)"
    lines = [
        HEADING,
        "",
        f"Written by `python3 bench/fleet.py` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: "
        f"the fleet demo (`bash scripts/demo.sh --policy P {flags}`), one run per policy, same "
        "seed and settings: separate Python and Node agent processes make read-modify-write edits "
        "of shared files, a unit being one file or two (the second taken while holding the first), "
        "through one `klock serve` that is SIGKILLed and restarted partway, with an agent of each "
        "language frozen past its TTL. Deaths are the DIE verdicts and DIED events the "
        "agents' clients counted; elapsed is the Klock phase's wall time (restart downtime and "
        "freezes included, the same for both). One run each: the numbers move from run to run.",
        "",
        "| policy | Python edits | Python deaths | Node edits | Node deaths | deaths per edit | edits / s | edits lost | all finished (no deadlock) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in (wd, dt):
        lines.append(
            f"| {r['policy']} | {r['python_edits']} | {r['python_deaths']} | {r['node_edits']} | "
            f"{r['node_deaths']} | {per_edit(r):.3f} | {throughput(r):.1f} | {r['lost']} | {r['finished']} |"
        )
    ok_runs = all(r["finished"] == "yes" and r["lost"] == 0 and r["exit"] == 0 for r in (wd, dt))
    lines += [
        "",
        "| target | measured | status |",
        "|---|---|---|",
        f"| deaths per committed edit under detect ≥ 5× fewer than wait_die | {fewer:.1f}× fewer | {met(fewer >= 5)} |",
        f"| edits / s under detect no lower than wait_die | {throughput(dt):.1f} vs {throughput(wd):.1f} | {met(throughput(dt) >= throughput(wd))} |",
        f"| every agent finished, nothing lost, both runs | {'yes' if ok_runs else 'no'} | {met(ok_runs)} |",
        "",
    ]
    return "\n".join(lines)


def write(path: str, text: str) -> None:
    old = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
    at = old.find(HEADING)
    if at < 0:
        new = old.rstrip("\n") + ("\n\n" if old else "") + text
    else:
        end = old.find("\n## ", at + len(HEADING))
        new = old[:at] + text + ("" if end < 0 else old[end:])
    with open(path, "w", encoding="utf-8") as f:
        f.write(new)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "REPORT.md"))
    p.add_argument("extra", nargs="*", help="after --: flags for examples/fleet/run.py")
    args = p.parse_args()
    runs = [run(policy, args.extra) for policy in POLICIES]
    text = section(runs, args.extra)
    write(args.out, text)
    print(text)
    print(f"fleet: wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
