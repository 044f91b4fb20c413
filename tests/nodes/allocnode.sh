#!/bin/sh
# Builds tests/nodes/allocnode.c into the folder given first (a cell's,
# never the repository) and becomes it: allocnode.sh DIR ARGS...
set -e
dir=$1
shift
cc -O1 -g -fno-omit-frame-pointer -pthread -o "$dir/allocnode" "$(dirname "$0")/allocnode.c"
exec "$dir/allocnode" "$@"
