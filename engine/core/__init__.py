"""The torch-free foundation every layer speaks: the run config and its flags, the task registry and
spec vocabulary, exit codes, migrations of what older releases wrote, and bounded file reading."""
