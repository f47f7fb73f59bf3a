"""Running a campaign: the Hypothesis search per (implementation, op) cell (campaign), crash and hang
isolation in worker processes (isolation), the `fuzz` runner (run) and the pipelined device runner (pipeline)."""
