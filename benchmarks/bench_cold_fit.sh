#!/usr/bin/env bash
# Cold fit of the shipped default profile as a user meets it: `trainsim run gpt20b-dgxh100 -q` as a
# whole process with an empty profile cache (TRAINSIM_CACHE, a fresh folder each time), N times;
# then the cache's size and N warm `trainsim predict gpt20b-dgxh100 --json` runs. Medians printed.
#   benchmarks/bench_cold_fit.sh [N=3]
set -eu
N=${1:-3}
tmp=$(mktemp -d)
cold=(); warm=()
for i in $(seq "$N"); do
  rm -rf "$tmp/cache"; mkdir -p "$tmp/cache"
  s=$(date +%s.%N); TRAINSIM_CACHE="$tmp/cache" trainsim run gpt20b-dgxh100 -q > /dev/null; e=$(date +%s.%N)
  cold+=("$(echo "$e - $s" | bc)")
done
size=$(du -sm "$tmp/cache" | cut -f1)
for i in $(seq "$N"); do
  s=$(date +%s.%N); TRAINSIM_CACHE="$tmp/cache" trainsim predict gpt20b-dgxh100 --json > /dev/null; e=$(date +%s.%N)
  warm+=("$(echo "$e - $s" | bc)")
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "cold run (fit + cache + simulate), s: ${cold[*]}  median $(median "${cold[@]}")"
echo "cache: ${size} MB"
echo "warm predict --json, s: ${warm[*]}  median $(median "${warm[@]}")"
rm -rf "$tmp"
