from setuptools import find_packages, setup

setup(
    name="fairseq_shared",
    version="0.1.0",
    description="Cross-layer parameter sharing and attention sharing for fairseq Transformers",
    packages=find_packages(include=["fairseq_shared", "fairseq_shared.*"]),
    python_requires=">=3.10",
    # fairseq-fixed, torch and the rest are installed by scripts/setup_env.sh (see README).
    install_requires=[],
    entry_points={
        "console_scripts": [
            "fairseq-shared-average=fairseq_shared.cli.average_checkpoints:main",
        ]
    },
)
