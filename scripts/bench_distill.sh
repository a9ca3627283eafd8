#!/bin/bash
# The distillation chain of benchmarks/RESULTS.md (issue 41), end to end on ../shared/data/enfr:
# the teacher, the student on the original data (the baseline), the teacher's distillation of
# the same data, the student on it for as many updates as the baseline made, then the figures.
#   make bench-distill                       # OUT=runs/bench-distill TEACHER_MINUTES=30 ...
set -euo pipefail
OUT=${OUT:-runs/bench-distill}
TEACHER_MINUTES=${TEACHER_MINUTES:-30}
STUDENT_MINUTES=${STUDENT_MINUTES:-12}
DATA=${DATA:-../shared/data/enfr}

[ -f "$OUT/teacher/checkpoints/best.safetensors" ] ||
    seq2seq train -c configs/enfr-small.yaml --run "$OUT/teacher" \
        --set train.max_minutes="$TEACHER_MINUTES" --set train.seed=1
[ -f "$OUT/student-base/checkpoints/best.safetensors" ] ||
    seq2seq train -c configs/enfr-student.yaml --run "$OUT/student-base" \
        --set train.max_minutes="$STUDENT_MINUTES" --set train.seed=1
# The distilled student trains for the baseline's number of updates (a fair comparison on a
# machine whose load varies), with a generous time cap.
steps=$(seq2seq info --run "$OUT/student-base" --json | python -c 'import json,sys; print(json.load(sys.stdin)["steps_trained"])')
seq2seq distill --teacher "$OUT/teacher" -c configs/enfr-student.yaml \
    --set run_dir="$OUT/student-kd" --set train.max_steps="$steps" \
    --set train.max_minutes=$((STUDENT_MINUTES * 3)) --set train.seed=1
seq2seq export --run "$OUT/student-kd" --format int8 "$OUT/bench/student-int8"
python scripts/bench_distill.py --teacher "$OUT/teacher" --student "$OUT/student-kd" \
    --baseline "$OUT/student-base" --data "$DATA" --out "$OUT/bench"
