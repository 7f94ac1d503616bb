# kiln: `make demo` and `make test` install what is missing, configure, build and run.
# Debian packages come from apt-get (run as root), NumPy >= 2 from PyPI (test references), and on x86-64
# oneMKL's static libraries from PyPI, linked by scripts/build-mkl into .deps/mkl/lib/libkiln_mkl.so.

# clang, libFuzzer (libclang-rt-dev) and clang's OpenMP (libomp-dev) build the fuzz preset.
APT_PACKAGES := cmake ninja-build g++ make python3 python3-pip libopenblas-dev libopenblas-openmp-dev libgtest-dev libfmt-dev libcli11-dev python3-matplotlib nlohmann-json3-dev zlib1g-dev libdnnl-dev libfftw3-dev libopenmpi-dev openmpi-bin libicu-dev clang libclang-rt-dev libomp-dev
# kiln's text corpus (examples, `kiln tokenize`, tests/text): the Jargon File, public domain, from Debian's jargon-text
# (/usr/share/doc/jargon-text/jargon.txt.gz); libicu-dev gives the tokenizer its Unicode categories.
APT_PACKAGES += jargon-text
# The demo trains on Fashion-MNIST: Debian's dataset-fashion-mnist puts it in /usr/share/datasets/fashion-mnist.
DEMO_PACKAGES := dataset-fashion-mnist
JOBS ?= $(shell nproc)
HAVE_CUDA := $(shell test -x /usr/local/cuda/bin/nvcc -o -f /usr/local/cuda/include/cuda_runtime.h && echo 1)
PRESETS := cpu $(if $(HAVE_CUDA),$(if $(wildcard src/cuda/*.cpp),cuda,),)
# `make test` also builds and runs the CPU tests under AddressSanitizer + UndefinedBehaviorSanitizer, with clang:
# the fuzz preset, whose ctest also replays each libFuzzer target's seeds and fuzzes it for KILN_FUZZ_SECONDS
# (docs/reliability.md, "Fuzzing"). It replaces the gcc asan preset there, so that kiln is compiled three times,
# not four; `cmake --preset asan` still builds the gcc one.
TEST_PRESETS := $(PRESETS) fuzz
# Tests labelled library_build compile kiln once more from its sources (consumer.add_subdirectory, minutes on
# two cores): make test leaves them out, scripts/gpu-check runs them (tests/consumer/CMakeLists.txt).
CTEST_FLAGS ?= --output-on-failure -j $(JOBS) --label-exclude library_build

.PHONY: demo test deps build build-test bench mkl clean format fuzz

deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  (apt-get update -qq || true) && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi
	@python3 -c 'import numpy, sys; sys.exit(int(numpy.__version__.split(".")[0]) < 2)' 2>/dev/null || \
	  python3 -m pip install -q "numpy>=2" || python3 -m pip install -q --break-system-packages "numpy>=2"
	@python3 -c 'import safetensors' 2>/dev/null || \
	  python3 -m pip install -q safetensors || python3 -m pip install -q --break-system-packages safetensors
	@# The Python package (python/, docs/python.md): nanobind and scikit-build-core build it, pytest runs its tests.
	@# The Array API test suite (third_party/array-api-tests, ctest's python.array_api) needs hypothesis, ndindex
	@# and pytest-json-report.
	@for m in nanobind:nanobind scikit_build_core:scikit-build-core pytest:pytest "hypothesis:hypothesis>=6.151" \
	  "ndindex:ndindex>=1.8" pytest_jsonreport:pytest-json-report; do \
	  python3 -c "import $${m%%:*}" 2>/dev/null || python3 -m pip install -q "$${m#*:}" || \
	    python3 -m pip install -q --break-system-packages "$${m#*:}"; \
	done
	@if [ "$$(uname -m)" = x86_64 ] && [ ! -f .deps/mkl/lib/libkiln_mkl.so ]; then \
	  ./scripts/build-mkl || echo "make: oneMKL could not be built (PyPI unreachable?): CPU products use OpenBLAS alone"; \
	fi
	@if [ -n "$(HAVE_CUDA)" ] && [ ! -f .deps/cudnn-frontend/include/cudnn_frontend.h ]; then \
	  ./scripts/fetch-cudnn-frontend || echo "make: no cudnn-frontend headers (PyPI unreachable?): GPU attention runs blocked, not fused"; \
	fi

build: deps
	@for p in $(PRESETS); do \
	  cmake --preset $$p -DKILN_WERROR=ON >/dev/null && cmake --build --preset $$p -j $(JOBS) || exit 1; \
	done

build-test: build
	@cmake --preset fuzz -DKILN_WERROR=ON >/dev/null && cmake --build --preset fuzz -j $(JOBS)

# ctest runs JOBS test processes at once on JOBS cores: OpenMP threads (OpenBLAS's) that spin-wait
# between parallel regions would fight each other for the cores (a loop of small matmuls ran 30x
# slower), so tests run with passive waiting unless OMP_WAIT_POLICY says otherwise.
test: build-test
	@for p in $(TEST_PRESETS); do \
	  echo "== ctest ($$p)"; (cd build/$$p && OMP_WAIT_POLICY=$${OMP_WAIT_POLICY:-passive} ctest $(CTEST_FLAGS)) || exit 1; \
	done

# The last preset built is the most capable one (cuda when the toolkit is there); `kiln bench` picks the
# best device present (cuda:0, else the CPU, where the GPU cases say why they are skipped).
demo: build
	@missing=""; for p in $(DEMO_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  (apt-get update -qq || true) && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi
	@p=$$(echo $(PRESETS) | awk '{print $$NF}'); k=./build/$$p/tools/kiln/kiln; $$k info && \
	  $$k train mlp --epochs 3 && \
	  echo "== a tiny GPT learns the Jargon File (a tokenizer of 1024 ids trained on it first)" && \
	  mkdir -p build/demo && $$k tokenize -o build/demo/jargon.bin --train-vocab 1024 && \
	  OMP_WAIT_POLICY=$${OMP_WAIT_POLICY:-passive} $$k train gpt --config d2 --data build/demo/jargon.bin \
	    --vocab build/demo/jargon.vocab.json --merges build/demo/jargon.merges.txt \
	    --steps 150 --batch 8 --seq 64 --lr 3e-3 --warmup 10 --log-every 25 && \
	  $$k bench --quick

bench: build
	./scripts/bench-cpu

# oneMKL (from PyPI's mkl-static, built by `deps` on x86-64) beside OpenBLAS for the CPU's large matrix products:
# the default presets use it when .deps/mkl is there (KILN_MKL=AUTO); `make mkl` requires it (build/cpu-mkl).
mkl: deps
	./scripts/build-mkl
	cmake --preset cpu-mkl -DKILN_WERROR=ON >/dev/null && cmake --build --preset cpu-mkl -j $(JOBS)
	cd build/cpu-mkl && OMP_WAIT_POLICY=$${OMP_WAIT_POLICY:-passive} ctest $(CTEST_FLAGS)

# Every libFuzzer target for FUZZ_SECONDS each (scripts/fuzz; docs/reliability.md, "Fuzzing").
FUZZ_SECONDS ?= 300
fuzz: deps
	./scripts/fuzz $(FUZZ_SECONDS)

clean:
	rm -rf build

format:
	clang-format -i $$(git ls-files '*.cpp' '*.hpp')
