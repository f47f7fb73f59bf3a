"""What reads a campaign's fixtures and run directories back, above the runner: replay, the standalone reproducer
(reproducer, reproducer_templates, embed) and bug report (bugreport), the report (report, report_html) and merge."""
