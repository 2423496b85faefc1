# Everything goes through one pinned Bun, installed from the npm registry into .tools/ when absent,
# so a machine with only Node and npm can run these targets.
BUN_VERSION := 1.4.5
TOOLS := $(CURDIR)/.tools
BUN := $(TOOLS)/node_modules/.bin/bun
DEPS_STAMP := node_modules/.sluice-deps

.PHONY: run test deps typecheck bench clean build release wasm

run: deps
	./sluice serve

test: deps
	$(BUN) test --timeout 60000

typecheck: deps
	$(BUN) x tsc -p tsconfig.json

deps: $(DEPS_STAMP)

# The SIMD kernels' bytes from their WebAssembly text (src/engine/sampling/simd), after editing it.
wasm: deps
	$(BUN) src/engine/sampling/simd/assemble.ts

# One self-contained linux-x64 executable: Bun, the code, the model worker, ONNX Runtime and the
# tokenizers addon (see src/packaging/build.ts).
build: deps
	$(BUN) src/packaging/build.ts dist/sluice

# dist/sluice-<version>-linux-x64.tar.gz: the binary, its SHA-256, the licence notices, the README.
release: build
	$(BUN) src/packaging/release.ts dist/sluice

$(BUN):
	@echo "installing bun $(BUN_VERSION) from the npm registry into .tools/"
	npm install --prefix $(TOOLS) --no-audit --no-fund --no-save bun@$(BUN_VERSION)
	@$(BUN) --version

$(DEPS_STAMP): package.json bun.lock | $(BUN)
	$(BUN) install --frozen-lockfile
	@touch $(DEPS_STAMP)

clean:
	rm -rf node_modules .tools dist test-output
