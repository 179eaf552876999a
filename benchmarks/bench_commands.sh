#!/usr/bin/env bash
# Time trainsim commands through the CLI at two revisions, alternately, from clean checkouts with
# separate profile caches (one warm-up each, then N runs of every command per revision). Prints one
# line per run: the revision (old/new), the command, wall seconds. `benchmarks/bench_revisions.sh`
# does the same for one `run` scenario and also prints its answer.
#
#   benchmarks/bench_commands.sh OLD_REV NEW_REV N 'predict gpt20b-dgxh100 --json' 'run gptneox-h100 -q' ...
#
# A command may name a file of the repository as {tree}/path (the new revision's checkout).
set -eu
OLD=$1; NEW=$2; N=$3; shift 3
REPO=$(git rev-parse --show-toplevel); T=${TMPDIR:-/tmp}/trainsim-cmds-$$
mkdir -p "$T"
. "$REPO/benchmarks/worktree_farm.sh"
make_farms "$OLD" "$NEW"
cd "$T"; unset PYTHONDONTWRITEBYTECODE
run() { local v=$1; shift; TRAINSIM_CACHE="$T/cache_$v" PYTHONPATH="$T/farm_$v" python -m trainsim "$@" > /dev/null 2>&1; }
for c in "$@"; do c=${c//\{tree\}/$T/wt_new}; for v in old new; do run $v $c; done; done  # fit and cache
for c in "$@"; do
  c=${c//\{tree\}/$T/wt_new}
  for i in $(seq "$N"); do
    for v in old new; do s=$(date +%s.%N); run $v $c; e=$(date +%s.%N); echo "$v|${c//$T\/wt_new/\{tree\}}|$(echo "$e - $s" | bc)"; done
  done
done
remove_farms
