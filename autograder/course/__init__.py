"""The course and its files: where things live, which assignment, a submission's files read safely
(intake, tampering), the hidden tests kept out of sight."""
