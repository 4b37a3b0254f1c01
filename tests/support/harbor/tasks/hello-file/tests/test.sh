#!/bin/bash
# Reads what the agent wrote in the box.
if [ "$(cat /app/hello.txt 2>/dev/null)" = "Hello, world!" ]; then
  echo "hello.txt is right"; echo 1 > /logs/verifier/reward.txt
else
  echo "hello.txt is missing or wrong: $(cat /app/hello.txt 2>&1)"; echo 0 > /logs/verifier/reward.txt
fi
