#!/bin/sh
# Slow on purpose when SLOW_STEP is set: a worker may be killed while it runs.
[ -n "$SLOW_STEP" ] && sleep "$SLOW_STEP"
echo two >> /app/state
