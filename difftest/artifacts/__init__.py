"""What a campaign leaves behind and what reads it: fixtures (fixtures; replay, reproducer) and run directories
(rundir, format in rundir.md; report, merge)."""
