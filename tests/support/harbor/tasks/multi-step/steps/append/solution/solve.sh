#!/bin/sh
# Held on purpose when SLOW_STEP names a file: the step waits until it exists in the
# box (a test kills the worker meanwhile, then creates it in the restored box).
if [ -n "$SLOW_STEP" ]; then
  until [ -e "$SLOW_STEP" ]; do sleep 0.1; done
fi
echo two >> /app/state
