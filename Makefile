# strata: `make demo` and `make test` set everything up on a fresh Debian 12
# machine (Debian packages via scripts/setup.sh), build, and run.
BUILD ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)
STRATA := $(BUILD)/src/cli/strata
export CCACHE_DIR ?= $(CURDIR)/.cache/ccache
# ccache may reuse objects built with the precompiled LibTorch header.
export CCACHE_SLOPPINESS := pch_defines,time_macros,include_file_mtime,include_file_ctime

.PHONY: setup configure build demo test test-fast bench format clean

setup:
	bash scripts/setup.sh

configure: setup
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_ARGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# The embedded default: synthetic data, a small model, no arguments. Builds
# only the strata binary and the libraries it links (no tests, no benches).
demo: configure
	cmake --build $(BUILD) -j $(JOBS) --target strata
	$(STRATA) train

# Every test, with the checks of the layering (scripts/check_layers.py), the
# docs' file references (scripts/check_doc_paths.py) and the clang
# thread-safety pass (scripts/thread_safety.sh) among them; the real-data
# tests need STRATA_DATA_DIR (e.g. ../shared/data).
test: build
	cd $(BUILD) && ctest --output-on-failure --timeout 1500

# The fast suite only (tests not labelled "slow").
test-fast: build
	cd $(BUILD) && ctest --output-on-failure -LE slow

bench: build
	bash bench/run_all.sh $(BUILD)

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf $(BUILD)
