"""A stand-in for sklearn (scripts/gpu_check_standins/README.md): the GPU check's fairseq imports it, never calls it."""
