# Sourced by bench_revisions.sh and bench_commands.sh: two revisions of the repository checked out
# with `git worktree` under $T/wt_old and $T/wt_new, each importable as `trainsim` from $T/farm_old and
# $T/farm_new (a folder of symlinks that mirrors the installed layout: trainsim/ plus its five
# subpackages), so that neither imports the working tree's package.
#   make_farms OLD_REV NEW_REV    (uses $REPO and $T)
#   remove_farms
make_farms() {
  local v rev f p
  for v in old new; do
    rev=$([ $v = old ] && echo "$1" || echo "$2")
    git -C "$REPO" worktree add -q "$T/wt_$v" "$rev"
    mkdir -p "$T/farm_$v/trainsim"
    for f in "$T/wt_$v"/trainsim/*; do ln -s "$f" "$T/farm_$v/trainsim/"; done
    for p in operators topology calibration sim scenarios; do ln -s "$T/wt_$v/$p" "$T/farm_$v/trainsim/$p"; done
  done
}
remove_farms() {
  local v
  for v in old new; do git -C "$REPO" worktree remove --force "$T/wt_$v"; done
}
