"""Run the performance audit, one stage or all of them, and check the retained evidence.

    python projects/performance-audit/run.py --stage {1,2,3,4,all} \
        --implementation {starter,solution} --evidence-dir runs/performance-audit

Stages 1-3 call the functions in <implementation>/model.py and write evidence; stage 4 only
reads the evidence directory and checks it. `--stage all` runs 1, 2 and 3, then checks.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# The provenance record is the lesson's own (solutions/remat_lesson.py): one helper for both.
sys.path.insert(1, str(Path(__file__).resolve().parents[2] / "solutions"))

from audit import checks, evidence, spec  # noqa: E402  (the path above makes audit importable)

IMPLEMENTATION_HELP = (
    "which model.py to run: 'starter' is yours (learners: choose starter); 'solution' is the instructor's reference"
)


class AuditArgumentParser(argparse.ArgumentParser):
    def error(self, message):
        if "--implementation" in message:
            message += (
                ". Choose --implementation starter to run your own work in "
                "starter/model.py (solution is the instructor's reference run)"
            )
        super().error(message)


def parse_arguments(argv=None) -> argparse.Namespace:
    parser = AuditArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--stage",
        required=True,
        choices=["1", "2", "3", "4", "all"],
        help="1 calculations, 2 changed conditions, 3 evidence, 4 checks, all",
    )
    parser.add_argument("--implementation", required=True, choices=["starter", "solution"], help=IMPLEMENTATION_HELP)
    parser.add_argument(
        "--evidence-dir",
        type=Path,
        default=Path("runs/performance-audit"),
        help="where evidence is written and read (default: runs/performance-audit)",
    )
    return parser.parse_args(argv)


def clear_foreign_evidence(evidence_dir: Path, implementation: str) -> None:
    """Never mix evidence from the starter and the solution in one directory."""
    index = evidence.read_index(evidence_dir)
    if index is not None and index.get("implementation") != implementation:
        print(f"Note: {evidence_dir} held evidence from --implementation {index.get('implementation')}; clearing it.")
        for stage in spec.STAGE_FILES:
            evidence.remove_stage_files(evidence_dir, stage)
        (evidence_dir / spec.EVIDENCE_INDEX).unlink(missing_ok=True)


def run_stage(stage: int, model, implementation: str, evidence_dir: Path) -> None:
    from audit import stage1, stage2, stage3  # JAX is imported only when a stage runs

    evidence.remove_stage_files(evidence_dir, stage)
    module = {1: stage1, 2: stage2, 3: stage3}[stage]
    artifacts = module.run(model, evidence_dir)
    evidence.record_stage(evidence_dir, stage, implementation, artifacts)
    print(f"  evidence written to {evidence_dir}\n")


def check_and_report(evidence_dir: Path, implementation: str, stages) -> int:
    findings = checks.run_checks(evidence_dir, implementation, stages)
    print(checks.report(findings, evidence_dir, implementation))
    return 0 if all(finding.passed for finding in findings) else 1


def main(argv=None) -> int:
    arguments = parse_arguments(argv)
    evidence_dir, implementation = arguments.evidence_dir, arguments.implementation
    if arguments.stage == "4":
        return check_and_report(evidence_dir, implementation, [1, 2, 3, 4])

    from audit.learner import StageNotReady, load_model

    stages = [1, 2, 3] if arguments.stage == "all" else [int(arguments.stage)]
    evidence_dir.mkdir(parents=True, exist_ok=True)
    clear_foreign_evidence(evidence_dir, implementation)
    if arguments.stage == "all":
        for stage in spec.STAGE_FILES:
            evidence.remove_stage_files(evidence_dir, stage)
    model = load_model(implementation)
    for stage in stages:
        try:
            run_stage(stage, model, implementation, evidence_dir)
        except StageNotReady as not_ready:
            print(f"Stage {stage} cannot run yet.\n  {not_ready.message}", file=sys.stderr)
            if not_ready.hint:
                print(f"  next: {not_ready.hint}", file=sys.stderr)
            return 2
    # A single stage checks its own evidence; `all` runs the complete stage 4 check.
    return check_and_report(evidence_dir, implementation, [1, 2, 3, 4] if arguments.stage == "all" else stages)


if __name__ == "__main__":
    sys.exit(main())
