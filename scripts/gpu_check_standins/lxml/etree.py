"""A stand-in for lxml.etree (scripts/gpu_check_standins/README.md): every name is a function
that raises when called."""


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)

    def stand_in(*args, **kwargs):
        raise RuntimeError(f"lxml.etree.{name}: a stand-in of the GPU check; the real lxml is "
                           f"not installed on this machine")

    stand_in.__name__ = name
    return stand_in
