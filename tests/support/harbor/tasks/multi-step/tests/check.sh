#!/bin/sh
# Shared helper: reward 1 when /app/state is exactly $1 (lines given as \n).
want=$(printf "$1")
if [ "$(cat /app/state 2>/dev/null)" = "$want" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
cat /app/state 2>/dev/null
