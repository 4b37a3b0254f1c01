#!/bin/sh
awk '{ s += $1 } END { print s }' /data/numbers.txt > /app/answer.txt
