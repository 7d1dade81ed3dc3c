# Two commands do everything on a fresh machine (each installs what is missing
# into .venv first, and skips what is already there):
#   make demo   train the elliptical demo segmentor on the embedded demo data,
#               then print its per-class IoU and the path of a picture
#   make test   check the code style (make lint), then run the tests not
#               marked slow (no subprocess, torchrun, Slurm, export,
#               torch.compile or end-to-end training); make test-slow runs
#               those (CI's second step), make test-all both
# The inner loop: make test-fast (make test without lint). make test-kernels:
# the attack and training tests under the CPU's other ATen kernels (CI runs it
# after make test; docs/install.md, "Tests that hold on every CPU").
# More: make demo-dot (the dot-product twin), make demo-tb (both twins with
# their evidence live in TensorBoard: collapse, m, attention; then it prints
# the tensorboard command), make compare (both twins on 3
# seeds, JOBS trainings at once, one per core by default: mean and standard
# deviation of mIoU, and a plot of mIoU over iterations; runs that finished
# before are kept), make benchmark (the ViT-T
# 512 backbone against its dot-product baselines; BENCHMARK_ARGS=... for
# other configs and options), make speed (docs/benchmark.md's speed table: every
# backbone family at 512, one benchmark run each, on one thread, and the
# Mask2Former Swin-T segmentor with mmseg's and the elliptical decoder, with
# the attack steps in the eager runs; about 45 min before the attack steps,
# which add about as much again (estimated from ViT-T, not timed end to end);
# each run's report in work_dirs/speed/NAME/, the table in
# work_dirs/speed/overview.md), make report (make compare's runs as two
# arms of SEEDS runs side by side: accuracy per class, robustness, attacks
# with APGD and the gradient-masking audit, collapse, attention, speed, the
# verdicts across seeds; trains the missing runs first; what is measured
# already is kept; work_dirs/report/),
# make adversarial (both demo checkpoints under the quick preset: PGD,
# SegPGD and APGD-MCE, the elliptical one also through m; the paired verdict; work_dirs/adversarial/),
# make audit (the gradient-masking audit at its preset on both demo
# checkpoints, the first 32 test scenes, on AUDIT_PROCS processes, one per
# core (at most 8) by default: tools/dist_adversarial.sh; 12 min 45 s on 2
# cores; the same cells as one process; work_dirs/audit/),
# make certify (both demo checkpoints certified by randomised smoothing,
# SegCertify, at sigma 0.25 and 0.5, tau 0.6 / 0.75 / 0.9, on CERTIFY_PROCS
# processes, one per core by default; 4 min 10 s on 2 idle cores, 7 min 53 s
# of CPU; docs/certify.md; work_dirs/certify/),
# make certify-noise (the demo twins trained under Gaussian noise of sigma
# 0.25, configs/demo/*_noise.py, then certified at that sigma as make
# certify does; work_dirs/certify_noise/),
# make demo-at (both demo twins trained adversarially with the cheap recipe,
# configs/demo/*_adversarial.py, then the adversarial grid on the four
# checkpoints with the audit, on the first 32 test scenes: the trained twins
# beside the plainly trained ones, the paired verdict between the trained
# twins; work_dirs/demo_at/. Budget: 3000 iterations per twin at about 2.4
# times a plain iteration's time, plus the plain twins if missing, and the
# grid (about 17 min here); make report appends its section; docs/evidence.md),
# make export (make demo's checkpoint, trained first if missing, exported to
# ONNX, verified against PyTorch and tested with onnxruntime: its mIoU must
# equal PyTorch's within 0.01).
# mmcv: without CUDA the set-up installs mmcv-lite and a stand-in for mmcv's
# compiled ops (about 3 min in all); MMCV=full installs full mmcv (compiled
# for ~15 min unless WHEELHOUSE=DIR points pip at prebuilt wheels, e.g. an
# mmcv 2.1.0 wheel built for torch 2.13.0). make test-full-mmcv: the tests
# that touch mmcv's ops in a second venv with full mmcv (FULL_VENV).
# DEMO_THREADS (default 1) is the torch thread count of the demo runs: the
# demo's matrices are small, and two threads competing with other processes
# for two cores run many times slower than one. DEMO_ENV pins the threads
# and the CPU kernels (ATen's capability, MKL's code path, oneDNN's ISA) so
# that the demo trains to the same number on every x86-64 host with AVX2:
# mmseg_elliptical/utils/pinned_env.py is the one place (docs/demo.md, "One
# number on every host"); DEMO_THREADS=2 gives other numbers.
PYTHON ?= python3
VENV ?= .venv
WHEELHOUSE ?=
MMCV ?= auto
DEMO_THREADS ?= 1
DEMO_CONFIG ?= configs/demo/segmenter_elliptical-vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py
DEMO_DOT_CONFIG ?= configs/demo/segmenter_vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py
SEEDS ?= 0 1 2
BENCHMARK_ARGS ?= --saved-tensors --rounds 20
PY := $(VENV)/bin/python
DEMO_ENV = $(shell $(PYTHON) mmseg_elliptical/utils/pinned_env.py $(DEMO_THREADS))

.PHONY: setup demo demo-dot demo-tb compare export lint test test-fast test-slow test-all test-kernels \
	test-times benchmark \
	speed report adversarial audit test-full-mmcv demo-at certify certify-noise

setup:
	@PYTHON="$(PYTHON)" VENV="$(abspath $(VENV))" WHEELHOUSE="$(WHEELHOUSE)" MMCV="$(MMCV)" \
		bash tools/misc/setup_env.sh

# The ranges the measured demo runs ended in, rounded outwards, 9 runs each
# (seeds 0-4; seed 0 under ATen's default and avx512 kernels, 2 threads,
# unpinned): elliptical 83.77 to 85.40, dot-product 81.51 to 85.12; and on a
# second CPU model (Intel Xeon, pinned, seed 0): 84.52 and 85.44
# (docs/demo.md, "The spread").
DEMO_NOTE := custom_hooks.0.expected_note=docs/demo.md\#the-spread
DEMO_EXPECTED := --cfg-options 'custom_hooks.0.expected.mIoU=[83.7,85.4]' $(DEMO_NOTE)
DEMO_DOT_EXPECTED := --cfg-options 'custom_hooks.0.expected.mIoU=[81.5,85.5]' $(DEMO_NOTE)

demo: setup
	$(DEMO_ENV) $(PY) tools/train.py $(DEMO_CONFIG) --work-dir work_dirs/demo_elliptical \
		$(DEMO_EXPECTED)

demo-dot: setup
	$(DEMO_ENV) $(PY) tools/train.py $(DEMO_DOT_CONFIG) --work-dir work_dirs/demo_dot \
		$(DEMO_DOT_EXPECTED)

# Both twins with EllipticalEvidenceHook and TensorBoard, into one log dir.
DEMO_TB_DIR ?= work_dirs/demo_tb
demo-tb: setup
	$(DEMO_ENV) $(PY) tools/train.py $(DEMO_CONFIG:.py=_tensorboard.py) \
		--work-dir $(DEMO_TB_DIR)/elliptical
	$(DEMO_ENV) $(PY) tools/train.py $(DEMO_DOT_CONFIG:.py=_tensorboard.py) \
		--work-dir $(DEMO_TB_DIR)/dot-product
	@echo "Evidence of both twins: $(VENV)/bin/tensorboard --logdir $(DEMO_TB_DIR)"

# make compare trains JOBS runs at once (default: one per core), each on
# DEMO_THREADS torch threads.
JOBS ?=
COMPARE_DIR := work_dirs/compare

compare: setup
	$(DEMO_ENV) $(PY) tools/analysis_tools/compare_seeds.py $(DEMO_CONFIG) $(DEMO_DOT_CONFIG) \
		--names elliptical dot-product --seeds $(SEEDS) --work-dir $(COMPARE_DIR) \
		--threads $(DEMO_THREADS) $(if $(JOBS),--jobs $(JOBS))

DEMO_CKPT := work_dirs/demo_elliptical/iter_3000.pth
DEMO_DOT_CKPT := work_dirs/demo_dot/iter_3000.pth
DEMO_ONNX := work_dirs/demo_elliptical/demo_elliptical.onnx
REPORT_ARGS ?= --image data/demo_shapes/images/validation/demo_00002.jpg \
	--point 28 48 --layers 1 3 5 --speed-size 64 --speed-rounds 20 --baseline dot-product \
	--attack-batch-size 16

# make report: make compare's runs (SEEDS, trained first where missing) as
# two arms, elliptical and dot-product, of one run per seed.
REPORT_MODELS = $(foreach s,$(SEEDS),$(DEMO_CONFIG) $(COMPARE_DIR)/elliptical/seed$(s)/iter_3000.pth) \
	$(foreach s,$(SEEDS),$(DEMO_DOT_CONFIG) $(COMPARE_DIR)/dot-product/seed$(s)/iter_3000.pth)
REPORT_NAMES = $(foreach s,$(SEEDS),elliptical) $(foreach s,$(SEEDS),dot-product)

# When make demo-at's checkpoints exist, make report adds their section:
# make demo-at's grid (resumed in DEMO_AT_DIR; outside the report's budget).
REPORT_CKPTS = $(filter %.pth,$(REPORT_MODELS))

report: setup
	@$(PY) tools/misc/report_plan.py $(REPORT_CKPTS) $(if $(JOBS),--jobs $(JOBS))
	@$(MAKE) --no-print-directory compare
	$(DEMO_ENV) $(PY) tools/analysis_tools/compare_models.py $(REPORT_MODELS) \
		--names $(REPORT_NAMES) $(REPORT_ARGS) --work-dir work_dirs/report
	@if [ -f $(DEMO_AT_CKPT) ] && [ -f $(DEMO_AT_DOT_CKPT) ]; then \
		$(MAKE) --no-print-directory demo-at && \
		{ printf '\n## After adversarial training (make demo-at, one run per model)\n\n'; \
		  sed 's#](\([a-z_]*\.png\))#](../demo_at/\1)#; s/^#/##/' $(DEMO_AT_DIR)/adversarial.md; } \
		>> work_dirs/report/report.md && \
		echo "make report: the adversarially trained twins' section added to work_dirs/report/report.md"; \
	else \
		echo "make report: no adversarially trained twins ($(DEMO_AT_CKPT)): make demo-at adds that section"; \
	fi

$(DEMO_CKPT):
	$(MAKE) demo

$(DEMO_DOT_CKPT):
	$(MAKE) demo-dot

ADVERSARIAL_ARGS ?= --protocol quick --adaptive --batch-size 16

adversarial: setup $(DEMO_CKPT) $(DEMO_DOT_CKPT)
	$(DEMO_ENV) $(PY) tools/analysis_tools/adversarial.py \
		$(DEMO_CONFIG) $(DEMO_CKPT) $(DEMO_DOT_CONFIG) $(DEMO_DOT_CKPT) \
		--names elliptical dot-product --baseline dot-product $(ADVERSARIAL_ARGS) \
		--work-dir work_dirs/adversarial

# One process per core, at most 8 (each holds about 650 MB; 32 scenes).
AUDIT_PROCS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); echo $$(( n < 8 ? n : 8 )))
AUDIT_ARGS ?= --protocol quick --adaptive --audit --batch-size 16 --max-images 32

audit: setup $(DEMO_CKPT) $(DEMO_DOT_CKPT)
	$(DEMO_ENV) PYTHON=$(PY) tools/dist_adversarial.sh $(AUDIT_PROCS) \
		$(DEMO_CONFIG) $(DEMO_CKPT) $(DEMO_DOT_CONFIG) $(DEMO_DOT_CKPT) \
		--names elliptical dot-product --baseline dot-product $(AUDIT_ARGS) \
		--work-dir work_dirs/audit

# make certify: both demo twins certified by randomised smoothing
# (SegCertify) at sigma 0.25 and 0.5, tau 0.6, 0.75 and 0.9 from the same
# draws (n0 10, n 200), Holm and Bonferroni, every test scene, on
# CERTIFY_PROCS processes (one per core, at most 8); work_dirs/certify/.
CERTIFY_PROCS ?= $(AUDIT_PROCS)
CERTIFY_ARGS ?= --protocol radii --sigmas 0.25 0.5

certify: setup $(DEMO_CKPT) $(DEMO_DOT_CKPT)
	$(DEMO_ENV) PYTHON=$(PY) tools/dist_certify.sh $(CERTIFY_PROCS) \
		$(DEMO_CONFIG) $(DEMO_CKPT) $(DEMO_DOT_CONFIG) $(DEMO_DOT_CKPT) \
		--names elliptical dot-product --baseline dot-product $(CERTIFY_ARGS) \
		--work-dir work_dirs/certify

# make certify-noise: the demo twins trained under Gaussian noise of sigma
# 0.25 (configs/demo/*_noise.py; trained first where missing), certified as
# make certify does at that sigma; work_dirs/certify_noise/.
DEMO_NOISE_CONFIG := $(DEMO_CONFIG:.py=_noise.py)
DEMO_NOISE_DOT_CONFIG := $(DEMO_DOT_CONFIG:.py=_noise.py)
DEMO_NOISE_CKPT := work_dirs/demo_noise_elliptical/iter_3000.pth
DEMO_NOISE_DOT_CKPT := work_dirs/demo_noise_dot/iter_3000.pth

certify-noise: setup $(DEMO_NOISE_CKPT) $(DEMO_NOISE_DOT_CKPT)
	$(DEMO_ENV) PYTHON=$(PY) tools/dist_certify.sh $(CERTIFY_PROCS) \
		$(DEMO_NOISE_CONFIG) $(DEMO_NOISE_CKPT) $(DEMO_NOISE_DOT_CONFIG) $(DEMO_NOISE_DOT_CKPT) \
		--names elliptical-noise dot-product-noise --baseline dot-product-noise \
		--protocol radii --sigmas 0.25 --work-dir work_dirs/certify_noise

$(DEMO_NOISE_CKPT):
	$(DEMO_ENV) $(PY) tools/train.py $(DEMO_NOISE_CONFIG) --work-dir work_dirs/demo_noise_elliptical

$(DEMO_NOISE_DOT_CKPT):
	$(DEMO_ENV) $(PY) tools/train.py $(DEMO_NOISE_DOT_CONFIG) --work-dir work_dirs/demo_noise_dot

DEMO_AT_CONFIG := $(DEMO_CONFIG:.py=_adversarial.py)
DEMO_AT_DOT_CONFIG := $(DEMO_DOT_CONFIG:.py=_adversarial.py)
DEMO_AT_CKPT := work_dirs/demo_at_elliptical/iter_3000.pth
DEMO_AT_DOT_CKPT := work_dirs/demo_at_dot/iter_3000.pth
DEMO_AT_ARGS ?= --protocol quick --adaptive --audit --queries 50 --batch-size 16 --max-images 32
DEMO_AT_DIR := work_dirs/demo_at

demo-at: setup $(DEMO_CKPT) $(DEMO_DOT_CKPT) $(DEMO_AT_CKPT) $(DEMO_AT_DOT_CKPT)
	$(DEMO_ENV) $(PY) tools/analysis_tools/adversarial.py \
		$(DEMO_AT_CONFIG) $(DEMO_AT_CKPT) $(DEMO_AT_DOT_CONFIG) $(DEMO_AT_DOT_CKPT) \
		$(DEMO_CONFIG) $(DEMO_CKPT) $(DEMO_DOT_CONFIG) $(DEMO_DOT_CKPT) \
		--names elliptical-at dot-product-at elliptical dot-product \
		--baseline dot-product-at $(DEMO_AT_ARGS) --work-dir $(DEMO_AT_DIR)

$(DEMO_AT_CKPT):
	$(DEMO_ENV) $(PY) tools/train.py $(DEMO_AT_CONFIG) --work-dir work_dirs/demo_at_elliptical

$(DEMO_AT_DOT_CKPT):
	$(DEMO_ENV) $(PY) tools/train.py $(DEMO_AT_DOT_CONFIG) --work-dir work_dirs/demo_at_dot

export: setup $(DEMO_CKPT)
	$(DEMO_ENV) $(PY) tools/deployment/pytorch2onnx.py $(DEMO_CONFIG) --checkpoint $(DEMO_CKPT) \
		--output-file $(DEMO_ONNX) --shape 64 64 --dynamic-export --verify
	$(DEMO_ENV) $(PY) tools/deployment/onnx_test.py $(DEMO_CONFIG) $(DEMO_ONNX) \
		--checkpoint $(DEMO_CKPT) --work-dir work_dirs/demo_elliptical/onnx_test

LINT_PATHS := mmseg_elliptical tools tests configs setup.py

lint: setup
	$(PY) -m flake8 $(LINT_PATHS)
	$(PY) -m isort --check-only --diff $(LINT_PATHS)
	$(PY) -m yapf --diff --recursive $(LINT_PATHS)

# pytest-xdist workers, each on one OpenMP thread (two threads per worker on
# two cores spin-wait on each other); TEST_WORKERS=0: one process. The tests
# of an xdist_group (a module whose module-scoped fixture takes minutes) run on
# one worker, so that the fixture is built once.
TEST_WORKERS ?= 2
PYTEST := OMP_NUM_THREADS=1 $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup

# make test: lint and every test not marked slow (about 4 min here);
# make test-slow: the end-to-end ones (subprocesses, torchrun, Slurm, ONNX
# export, torch.compile, training), CI's second step; make test-all: both.
test: setup lint
	$(PYTEST) -m "not slow"

test-fast: setup
	$(PYTEST) -m "not slow"

test-slow: setup
	$(PYTEST) -m slow

test-all: test test-slow

# The tests whose results ride on the CPU's kernels (attacks compared with
# their oracles, adversarial training), under each ATen capability the CPU
# has beside the one make test ran them under (issue 52; CI runs it after
# make test): they must hold on any x86-64 host. torch takes
# ATEN_CPU_CAPABILITY on trust (avx512 on a CPU without it dies of an
# illegal instruction), so the CPU's are those up to torch's own choice.
KERNEL_TESTS ?= tests/test_robustness/test_attacks \
	tests/test_engine/test_adversarial_training.py \
	tests/test_robustness/test_grid/test_attack_grid.py
CAPABILITY = $(PY) -c 'import torch; print(torch.backends.cpu.get_cpu_capability().lower())'
CAPABILITIES = default avx2 avx512

test-kernels: setup
	@own=$$($(CAPABILITY) 2>/dev/null); \
	case " $(CAPABILITIES) " in *" $$own "*) ;; \
		*) echo "test-kernels: torch runs '$$own' here, none of $(CAPABILITIES)"; exit 0;; esac; \
	above=; \
	for cap in $(CAPABILITIES); do \
		if [ -n "$$above" ]; then echo "test-kernels: $$cap: not on this CPU"; continue; fi; \
		if [ "$$cap" = "$$own" ]; then echo "test-kernels: $$cap: make test's own"; above=1; continue; fi; \
		echo "test-kernels: ATEN_CPU_CAPABILITY=$$cap"; \
		ATEN_CPU_CAPABILITY=$$cap $(PYTEST) -m "not slow" $(KERNEL_TESTS) || exit 1; \
	done

# The suite's time per test folder (every test, one run), a markdown table.
test-times: setup
	-$(PYTEST) --junitxml=work_dirs/test-times.xml -o junit_family=xunit2
	$(PY) tools/misc/test_times.py work_dirs/test-times.xml

# Full mmcv keeps a test: a second venv with mmcv's compiled ops (from
# FULL_WHEELHOUSE, CI's ../shared/wheels; compiled without it), running the
# tests that reach mmcv's ops (deformable attention, Mask2Former and
# MaskFormer, their export) and the stand-in's tests (a real extension found).
FULL_VENV ?= .venv-full
FULL_WHEELHOUSE ?= ../shared/wheels
FULL_MMCV_TESTS ?= tests/test_tools/test_mmcv_ext_standin.py \
	tests/test_models/test_decode_heads/test_mmdet_extra.py \
	tests/test_models/test_decode_heads/test_query_decoder.py \
	tests/test_models/test_decode_heads/test_mask_head_configs.py \
	tests/test_deploy/test_query_head_export.py \
	tests/test_benchmark/test_query_head_variants.py

test-full-mmcv:
	@PYTHON="$(PYTHON)" VENV="$(abspath $(FULL_VENV))" MMCV=full EXTRAS=tests,mmdet,deploy \
		WHEELHOUSE="$(if $(wildcard $(FULL_WHEELHOUSE)),$(abspath $(FULL_WHEELHOUSE)))" \
		bash tools/misc/setup_env.sh
	OMP_NUM_THREADS=1 $(FULL_VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) $(FULL_MMCV_TESTS)

benchmark: setup
	$(PY) tools/analysis_tools/benchmark.py $(BENCHMARK_ARGS) --out-dir work_dirs/benchmark

SPEED := OMP_NUM_THREADS=1 $(PY) tools/analysis_tools/benchmark.py --sizes 512 --memory tensors
# The attack steps (forward and backward to the input, plain and adaptive) of
# the eager runs; the attack tool runs eager, so the compiled runs skip them.
ATTACK := --attack-sizes 512
VIT_T := configs/segmenter/segmenter_elliptical-vit-t_mask_8xb1-160k_ade20k-512x512.py
M2F_T := configs/mask2former/mask2former_elliptical-swin-t
SPEED_RUNS := vit-t_b1 vit-t_b4 vit-t_b1_compile vit-t_b4_compile mit-b0 pcpvt-s swin-t beit-b \
	m2f-swin-t

speed: setup
	$(SPEED) $(VIT_T) --names vit-t --rounds 20 --saved-tensors $(ATTACK) --out-dir work_dirs/speed/vit-t_b1
	$(SPEED) $(VIT_T) --names vit-t --batch-size 4 --rounds 10 --saved-tensors $(ATTACK) \
		--out-dir work_dirs/speed/vit-t_b4
	$(SPEED) $(VIT_T) --names vit-t --rounds 20 --compile --out-dir work_dirs/speed/vit-t_b1_compile
	$(SPEED) $(VIT_T) --names vit-t --batch-size 4 --rounds 10 --compile --out-dir work_dirs/speed/vit-t_b4_compile
	$(SPEED) configs/segformer/segformer_elliptical-mit-b0_8xb2-160k_ade20k-512x512.py \
		--names mit-b0 --rounds 20 --saved-tensors $(ATTACK) --out-dir work_dirs/speed/mit-b0
	$(SPEED) configs/twins/twins_elliptical-pcpvt-s_uperhead_8xb4-160k_ade20k-512x512.py \
		--names pcpvt-s --rounds 12 --saved-tensors $(ATTACK) --out-dir work_dirs/speed/pcpvt-s
	$(SPEED) configs/swin/elliptical-swin-tiny-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py \
		--names swin-t --rounds 8 --saved-tensors $(ATTACK) --out-dir work_dirs/speed/swin-t
	$(SPEED) configs/beit/elliptical-beit-base_upernet_8xb2-160k_ade20k-640x640.py \
		--names beit-b --rounds 6 --saved-tensors $(ATTACK) --cfg-options model.backbone.img_size=512 \
		--out-dir work_dirs/speed/beit-b
	$(SPEED) $(M2F_T)_8xb2-160k_ade20k-512x512.py $(M2F_T)_elliptical-mask_8xb2-160k_ade20k-512x512.py \
		--names m2f-swin-t m2f-swin-t+decoder --whole-model --rounds 3 --saved-tensors $(ATTACK) \
		--out-dir work_dirs/speed/m2f-swin-t
	OMP_NUM_THREADS=1 $(PY) tools/analysis_tools/benchmark_layer.py --rounds 60 --min-run-time 0.2 --out-dir work_dirs/speed/layer
	$(PY) tools/analysis_tools/benchmark_overview.py --out-dir work_dirs/speed \
		$(addprefix work_dirs/speed/,$(SPEED_RUNS))
