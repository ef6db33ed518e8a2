#!/usr/bin/env bash
# poll.sh SECS: wait up to SECS (stop early when queue done), show progress, pack results into $OUT
W=$HOME/lead; end=$((SECONDS+${1:-20}))
while [ $SECONDS -lt $end ] && [ ! -f $W/longctx.done -o ! -f $W/queueB.done ]; do sleep 5; done
date +%T; echo "--- queue"; tail -n 30 $W/queue.log 2>/dev/null; echo "--- build"; tail -n 3 $W/build.log 2>/dev/null; cat $W/build.rc 2>/dev/null
echo "--- longctx"; tail -n 5 $W/outL/driver.log 2>/dev/null
cd $W && tar czf $OUT/res.tgz --exclude="*.gguf" outA outB outL outS queue.log build.log 2>/dev/null; ls -la $OUT
