"""What d5's commands do, level by level, without the command-line parsing."""
