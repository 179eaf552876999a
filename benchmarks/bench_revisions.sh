#!/usr/bin/env bash
# Time `trainsim run SCENARIO -q` through the CLI at two revisions, alternately, from clean checkouts
# with separate profile caches (one warm-up each, then N pairs). Prints one line per run: the
# revision, wall seconds, and the run's own iteration time and event count (they must agree when
# the change is not meant to move the answer).
#
#   benchmarks/bench_revisions.sh OLD_REV NEW_REV [SCENARIO] [N]
#   e.g. benchmarks/bench_revisions.sh f9bf7c2 51c8bc2 gpt20b-dgxh100 7   (docs/benchmarks.md)
#
# Each revision is checked out with `git worktree` under $TMPDIR and imported through a folder of
# symlinks that mirrors the installed layout (trainsim/ plus its five subpackages), run from
# $TMPDIR so the working tree's package is not on the path.
set -eu
OLD=$1; NEW=$2; SCENARIO=${3:-gpt20b-dgxh100}; N=${4:-7}
REPO=$(git rev-parse --show-toplevel); T=${TMPDIR:-/tmp}/trainsim-bench-$$
mkdir -p "$T"
. "$REPO/benchmarks/worktree_farm.sh"
make_farms "$OLD" "$NEW"
cd "$T"; unset PYTHONDONTWRITEBYTECODE
run() { TRAINSIM_CACHE="$T/cache_$1" PYTHONPATH="$T/farm_$1" python -m trainsim run "$SCENARIO" -q; }
for v in old new; do run $v > /dev/null 2>&1; done  # fit and cache the profile
for i in $(seq "$N"); do
  for v in old new; do
    s=$(date +%s.%N); out=$(run $v 2>&1); e=$(date +%s.%N)
    echo "$v $(echo "$e - $s" | bc) $(echo "$out" | grep -E 'iteration time|events' | tr -s ' ' | tr '\n' ' ')"
  done
done
remove_farms
