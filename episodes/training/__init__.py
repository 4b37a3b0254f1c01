"""Training data from finished episodes: token-level samples and their export.

- `samples`: one episode's model calls -> `Sample`s (prompt ids, completion ids, mask,
  logprobs), merged across calls while each prompt extends the last;
- `export`: a batch's samples as rows (reward, group advantage) in Parquet or JSONL.

No Temporal here: the CLI (`episodes export`) reads the histories and hands these
modules typed transcripts, so trainers can call them on transcripts they hold.
"""
