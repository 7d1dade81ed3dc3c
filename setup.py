"""Packaging for mmseg-elliptical, an MMSegmentation 1.x plugin."""
from importlib.metadata import PackageNotFoundError, version
from setuptools import find_packages, setup

MMCV_VERSIONS = '>=2.0.0rc4,<2.2.0'


def mmcv_requirement() -> str:
    """mmcv-lite where the set-up installed it (a CPU venv, with a stand-in
    for the compiled ops: docs/install.md), else full mmcv."""
    try:
        version('mmcv-lite')
    except PackageNotFoundError:
        return 'mmcv' + MMCV_VERSIONS
    return 'mmcv-lite' + MMCV_VERSIONS


def readme() -> str:
    with open('README.md', encoding='utf-8') as f:
        return f.read()


setup(
    name='mmseg-elliptical',
    version='0.1.0',
    description='Elliptical Attention (NeurIPS 2024) for MMSegmentation 1.x',
    long_description=readme(),
    long_description_content_type='text/markdown',
    license='Apache-2.0',
    python_requires='>=3.8',
    packages=find_packages(include=['mmseg_elliptical', 'mmseg_elliptical.*']),
    install_requires=[
        'torch>=2.0,<2.14',
        mmcv_requirement(),
        'mmengine>=0.10.0,<1.0',
        'mmsegmentation>=1.2.0,<1.3',
        # mmengine resolves `mmseg::` configs through pkg_resources
        'setuptools<81',
        'ftfy',
        'regex',
        'numpy',
        'matplotlib',
        # markdown tables (TableStyle.MARKDOWN); mmseg depends on it too
        'prettytable>=3.12',
    ],
    extras_require={
        'tests': ['pytest>=7', 'pytest-timeout', 'pytest-xdist'],
        'robustness': ['imagecorruptions-imaug>=1.1.5'],
        'lint': ['flake8==7.5.0', 'isort==9.0.2', 'yapf==0.43.0'],
        # Mask2Former, MaskFormer and KNet (mmdet asserts mmcv < 2.2.0)
        'mmdet': ['mmdet==3.3.0'],
        # the seeds' runs as jobs, local or on Slurm (compare_seeds.py,
        # mmseg_elliptical/utils/cluster.py)
        'cluster': ['submitit==1.5.4'],
        # TensorboardVisBackend (the evidence hook's scalars; make demo-tb)
        'tensorboard': ['tensorboard>=2.21,<2.22'],
        # The estimator's Triton kernels (attention/fused.py): on CUDA; on
        # the CPU their tests run them in Triton's interpreter. Unpinned
        # above 3.4, so that a CUDA torch keeps the Triton it depends on.
        'triton': ['triton>=3.4'],
        # ONNX export (torch.onnx's dynamo exporter) and onnxruntime, at the
        # versions tested with torch 2.13 (docs/deploy.md)
        'deploy': [
            'onnx>=1.23.2,<1.24', 'onnxruntime>=1.32,<1.33',
            'onnxscript>=0.7.2,<0.8'
        ],
    },
    zip_safe=False,
)
