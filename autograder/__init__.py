"""The bundle's pipeline for assignment performance-05: sync, release, execute, validate, grade."""
