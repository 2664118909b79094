"""The commands an instructor types: the `autograder` entry point, export, and the benchmark."""
