#!/bin/sh
# compare.sh: ffd against River on one fresh private PostgreSQL cluster.
#
#   bench/compare.sh [scenario] [rounds] [more ffd bench flags]
#
# scenario is throughput (the default), curve or enqueue; rounds defaults
# to 5. It builds ffd and the River peer (bench/peers/river, a module of
# its own), then runs `ffd bench --peer`, which starts the cluster, runs
# both sides alternately, each in fresh databases, and prints each side's
# medians and the median of the per-round ratios (--json for all of it).
set -eu
cd "$(dirname "$0")/.."
scenario=${1:-throughput}
rounds=${2:-5}
[ $# -gt 0 ] && shift
[ $# -gt 0 ] && shift
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT INT TERM
go build -o "$bin/ffd" ./cmd/ffd
(cd bench/peers/river && go build -o "$bin/river" .)
"$bin/ffd" bench --scenario "$scenario" --rounds "$rounds" --peer "$bin/river" "$@"
