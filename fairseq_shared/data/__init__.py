"""Data side: the offline Spanish-English Bible corpus, the papers' recipes, scoring.

Kept free of imports at package level so ``python -m fairseq_shared.cli.bible`` stays light
(importing ``fairseq_shared`` itself still registers the models with fairseq).
"""
