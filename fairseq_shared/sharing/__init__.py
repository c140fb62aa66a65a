"""Parameter sharing across the layers of a stack (Takase & Kiyono 2021; ALBERT; relaxed
sharing, Bae et al. 2025; One Wide FFN, Pires et al. 2023).

* :mod:`.assignment` -- which layer uses which parameter set (strategies, patterns, M,
  scopes), pure; the owner of the defaults and of the strategies that need M;
* :mod:`.flags` -- a stack's sharing flags and their validation (:class:`~.flags.StackSharing`);
* :mod:`.tying` -- tying a stack's parameters by set and scope;
* :mod:`.lora` -- relaxed sharing: a low-rank delta per position on every tied Linear weight;
* :mod:`.no_ffn` -- layers without their FFN sub-layer; :mod:`.wide_ffn` -- the width of
  One Wide FFN, pure arithmetic;
* :mod:`.stacks` -- the mixin that applies a plan to a model's stacks and saves and loads
  its state across sharing configurations.
"""
