#!/bin/sh
got=$(cat /app/answer.txt 2>/dev/null)
if [ "$got" = "$EXPECTED" ]; then r=1; ok=true; else r=0; ok=false; fi
echo "answer: '$got', expected '$EXPECTED'"
printf '{"reward": %s, "correct": %s, "answer": "%s"}\n' "$r" "$ok" "$got" > /logs/verifier/reward.json
