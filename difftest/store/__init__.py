"""What a campaign leaves on disk, below the runner that writes it: fixtures (fixtures; the signatures they store,
signatures), run directories (rundir, format in rundir.md; the host record, host) and atomic files (atomic)."""
