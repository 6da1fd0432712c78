# dcnconvert TensorRT plugin and its C++ harness; included by plugin_src/Makefile.
#
#   make plugin    build/plugin/libdcnconvert_plugin.so, copied to dcnconvert/_lib/trt<major>/ (the
#                  TensorRT major version of the headers), where dcnconvert looks for it; with
#                  PLUGIN_RUNTIME=tensorrt-rtx (TensorRT 11 headers), the library for TensorRT-RTX 1.5+,
#                  copied to dcnconvert/_lib/rtx1/
#   make plugin-rtx  the same as make plugin PLUGIN_RUNTIME=tensorrt-rtx
#   make plugin-lib  the library (and, for tensorrt-rtx, its forwarding object) in PLUGIN_BUILD_DIR only
#   make harness   build/plugin/dcn_harness (drives the plugin as TensorRT does; tests/harness/)
#
#   TENSORRT_INCLUDE_DIR  folder holding NvInfer.h, used as given (no fallback when it lacks NvInfer.h)
#   TRT_ROOT              a TensorRT tarball; $(TRT_ROOT)/include is searched first, then the usual
#                         install folders (TRT_SEARCH_DIRS below)
#   PLUGIN_RUNTIME        tensorrt (default) or tensorrt-rtx: the runtime the library registers in
#                         (trt/runtimeGuard.h); only the glue differs, the CUDA core objects are shared
#   PLUGIN_BUILD_DIR      where the plugin objects, library and harness go (default build/plugin, and
#                         build/plugin-rtx for tensorrt-rtx)
#   PLUGIN_INSTALL_DIR    where `make plugin` copies the library (default dcnconvert/_lib/trt<major>, or
#                         dcnconvert/_lib/rtx1)
#
# The library links the CUDA runtime statically (nvcc's default; no libcudart.so needed at run
# time) and does NOT link libnvinfer: it finds TensorRT's plugin registry at load time
# (trt/registration.cpp). It exports only getCreators and setLoggerFinder (trt/exports.map).
#
# The TensorRT-RTX library travels with libdcnconvert_rtx_forward.so, built and installed beside it: an
# object with soname libtensorrt_rtx.so that needs libtensorrt_rtx.so.1, which the library loads so that
# TensorRT-RTX's ONNX parser can open libtensorrt_rtx.so (trt/rtxParserLink.cpp). It is linked against a
# stub that only has that soname (made in PLUGIN_BUILD_DIR), so no TensorRT-RTX is needed to build it.

TENSORRT_INCLUDE_DIR ?=
TRT_ROOT ?=
PLUGIN_RUNTIME ?= tensorrt
ifeq ($(PLUGIN_RUNTIME),tensorrt)
PLUGIN_BUILD_DIR ?= $(BUILD_DIR)/plugin
PLUGIN_INSTALL_DIR ?= $(abspath $(CURDIR)/../dcnconvert/_lib)/trt$(TRT_MAJOR)
RUNTIME_DEFS :=
else ifeq ($(PLUGIN_RUNTIME),tensorrt-rtx)
# TensorRT-RTX 1.5 and newer have TensorRT 11's plugin registry, ILogger and ILoggerFinder.
RTX_HEADERS_MAJOR := 11
PLUGIN_BUILD_DIR ?= $(BUILD_DIR)/plugin-rtx
PLUGIN_INSTALL_DIR ?= $(abspath $(CURDIR)/../dcnconvert/_lib)/rtx1
RUNTIME_DEFS := -DDCN_RUNTIME_TENSORRT_RTX=1
else
$(error PLUGIN_RUNTIME=$(PLUGIN_RUNTIME): give tensorrt or tensorrt-rtx)
endif

TRT_SEARCH_DIRS := $(if $(TRT_ROOT),$(TRT_ROOT)/include) /usr/include/x86_64-linux-gnu /usr/include/aarch64-linux-gnu \
                   /usr/include /usr/local/tensorrt/include /opt/tensorrt/include
ifneq ($(strip $(TENSORRT_INCLUDE_DIR)),)
# An explicit folder is used as given (no silent fallback to another TensorRT).
TRT_INCLUDE := $(if $(wildcard $(TENSORRT_INCLUDE_DIR)/NvInfer.h),$(TENSORRT_INCLUDE_DIR))
else
TRT_INCLUDE := $(firstword $(foreach d,$(TRT_SEARCH_DIRS),$(if $(wildcard $(d)/NvInfer.h),$(d))))
endif
# The headers' major version (10.6+ define NV_TENSORRT_MAJOR through TRT_MAJOR_ENTERPRISE).
TRT_MAJOR := $(if $(TRT_INCLUDE),$(shell sed -n 's/^\#define \(NV_TENSORRT_MAJOR\|TRT_MAJOR_ENTERPRISE\) *\([0-9][0-9]*\).*/\2/p' \
    $(TRT_INCLUDE)/NvInferVersion.h | head -n 1))

# Every source is listed (no wildcards): tests/test_plugin_harness.py checks the lists against the folders.
TRT_SRCS := trt/dcnPlugin.cpp trt/dcnPluginBuild.cpp trt/dcnPluginRuntime.cpp trt/dcnPluginFields.cpp \
            trt/dcnPluginTensors.cpp trt/dcnPluginCreator.cpp trt/dcnPluginWeights.cpp trt/dcnPluginQuant.cpp \
            trt/registration.cpp \
            trt/runtimeGuard.cpp trt/rtxParserLink.cpp
TRT_HDRS := trt/dcnPlugin.h trt/dcnPluginTensors.h trt/dcnPluginWeights.h trt/dcnPluginQuant.h trt/checkMacros.h \
            trt/runtimeGuard.h \
            trt/rtxParserLink.h \
            $(CORE_DIR)/dcnParams.h $(CORE_DIR)/dcnForward.h
TRT_OBJS := $(patsubst trt/%.cpp,$(PLUGIN_BUILD_DIR)/%.o,$(TRT_SRCS))
# The core compiled for the plugin: position independent, its C API hidden (only the plugin's
# two entry points are exported). Shared by plugin builds against different TensorRT headers.
PLUGIN_CORE_DIR := $(BUILD_DIR)/plugin-core/$(subst $(dcn_space),-,$(strip $(CUDA_ARCHS) $(PTX_ARCH)))
PLUGIN_CORE_OBJS := $(patsubst $(CORE_DIR)/%.cu,$(PLUGIN_CORE_DIR)/%.o,$(CORE_SRCS))
PLUGIN_LIB := $(PLUGIN_BUILD_DIR)/libdcnconvert_plugin.so
PLUGIN_EXPORTS := trt/exports.map
# The TensorRT-RTX library's forwarding object (C), built for PLUGIN_RUNTIME=tensorrt-rtx only.
RTX_FORWARD_SRCS := trt/rtxForwardObject.c
RTX_FORWARD_NAME := libdcnconvert_rtx_forward.so
RTX_FORWARD_LIB := $(if $(RTX_HEADERS_MAJOR),$(PLUGIN_BUILD_DIR)/$(RTX_FORWARD_NAME))
RTX_LINK_STUB := $(PLUGIN_BUILD_DIR)/rtx-link-stub/libtensorrt_rtx_link_stub.so

HARNESS_DIR := $(abspath $(CURDIR)/../tests/harness)
HARNESS_SRCS := $(addprefix $(HARNESS_DIR)/,main.cpp testObjects.cpp testExprBuilder.cpp pluginLibrary.cpp \
                  testProblems.cpp fakeRegistry.cpp cpuChecks.cpp cpuCheckHelpers.cpp cpuPipelineChecks.cpp \
                  cpuShapeChecks.cpp cpuTypeFormatChecks.cpp cpuFieldChecks.cpp cpuEmbeddedChecks.cpp cpuRuntimeChecks.cpp \
                  cpuTf32Checks.cpp cpuQuantChecks.cpp cpuQuantTypeChecks.cpp \
                  gpuCases.cpp gpuQuantCases.cpp gpuInputs.cpp gpuDevice.cpp gpuManifest.cpp)
HARNESS_HDRS := $(addprefix $(HARNESS_DIR)/,harness.h cpuChecks.h gpuCases.h)
HARNESS_BIN := $(PLUGIN_BUILD_DIR)/dcn_harness

TRT_CXXFLAGS := -std=c++17 -O2 -Xcompiler -fPIC -Xcompiler -fvisibility=hidden -Xcompiler -Wall \
                -Xcompiler -Wextra -isystem $(TRT_INCLUDE) $(RUNTIME_DEFS)
# The architectures the library carries, written into it (registration.cpp's build-info line).
PLUGIN_ARCHS_DEF := -DDCN_BUILD_ARCHS='"$(strip $(SASS_ARCHS) $(PTX_ARCH))"'

.PHONY: plugin plugin-lib plugin-rtx harness check-trt-headers clean-plugin

# Records the header folder, architectures and runtime used, so that switching any rebuilds the glue
# (updated at parse time).
TRT_STAMP := $(PLUGIN_BUILD_DIR)/trt-include.txt
dcn_stamp_text := $(abspath $(TRT_INCLUDE)) $(strip $(SASS_ARCHS) $(PTX_ARCH)) $(PLUGIN_RUNTIME)
ifneq ($(TRT_INCLUDE),)
ifneq ($(filter plugin plugin-lib harness,$(MAKECMDGOALS)),)
dcn_stamp := $(shell mkdir -p $(PLUGIN_BUILD_DIR) && { echo '$(dcn_stamp_text)' | cmp -s - $(TRT_STAMP) \
    || echo '$(dcn_stamp_text)' > $(TRT_STAMP); })
endif
endif

plugin: check-trt-headers $(PLUGIN_INSTALL_DIR)/libdcnconvert_plugin.so \
        $(if $(RTX_FORWARD_LIB),$(PLUGIN_INSTALL_DIR)/$(RTX_FORWARD_NAME))

plugin-lib: check-trt-headers $(PLUGIN_LIB) $(RTX_FORWARD_LIB)

# The TensorRT-RTX library (TensorRT 11 headers), installed to dcnconvert/_lib/rtx1/.
plugin-rtx:
	$(MAKE) plugin PLUGIN_RUNTIME=tensorrt-rtx

harness: check-trt-headers $(PLUGIN_LIB) $(HARNESS_BIN)

check-trt-headers:
ifeq ($(TRT_INCLUDE),)
	@echo "error: TensorRT headers not found: no NvInfer.h in" >&2
	@$(if $(strip $(TENSORRT_INCLUDE_DIR)),echo "  TENSORRT_INCLUDE_DIR=$(TENSORRT_INCLUDE_DIR)" >&2,for d in $(TRT_SEARCH_DIRS); do echo "  $$d" >&2; done)
	@echo "The plugin needs TensorRT's public C++ headers (NvInfer.h, NvInferRuntime.h, NvInferVersion.h, ...:" >&2
	@echo "the include/ folder of a TensorRT tarball, the libnvinfer-headers-dev package, or include/ of" >&2
	@echo "https://github.com/NVIDIA/TensorRT). Point the build at them with" >&2
	@echo "  make plugin TENSORRT_INCLUDE_DIR=/path/to/TensorRT/include" >&2
	@echo "or set TRT_ROOT=/path/to/TensorRT (uses TRT_ROOT/include)." >&2
	@exit 1
else ifneq ($(if $(RTX_HEADERS_MAJOR),$(filter-out $(RTX_HEADERS_MAJOR),$(TRT_MAJOR))),)
	@echo "error: PLUGIN_RUNTIME=tensorrt-rtx needs TensorRT $(RTX_HEADERS_MAJOR) headers (TensorRT-RTX 1.5+ has" >&2
	@echo "their plugin ABI), but $(TRT_INCLUDE) holds TensorRT $(TRT_MAJOR)'s: set TENSORRT_INCLUDE_DIR" >&2
	@exit 1
else
	@command -v $(NVCC) >/dev/null 2>&1 || { echo "error: '$(NVCC)' not found; install the CUDA toolkit or set NVCC=/path/to/nvcc" >&2; exit 1; }
endif

$(TRT_STAMP): | check-trt-headers
	@test -f $@

$(PLUGIN_CORE_DIR)/%.o: $(CORE_DIR)/%.cu $(CORE_HDRS) | check-trt-headers
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $(call dcn_unit_gencode,$<) -DDCN_CORE_EXPORT= -I$(CORE_DIR) -c -o $@ $<

$(PLUGIN_BUILD_DIR)/%.o: trt/%.cpp $(TRT_HDRS) $(TRT_STAMP) | check-trt-headers
	$(NVCC) $(TRT_CXXFLAGS) $(PLUGIN_ARCHS_DEF) -c -o $@ $<

$(PLUGIN_LIB): $(TRT_OBJS) $(PLUGIN_CORE_OBJS) $(PLUGIN_EXPORTS)
	$(NVCC) -shared -cudart static -o $@.tmp $(TRT_OBJS) $(PLUGIN_CORE_OBJS) \
	    -Xlinker --no-undefined -Xlinker --version-script=$(PLUGIN_EXPORTS) -Xlinker -z,nodelete -ldl
	mv -f $@.tmp $@

ifneq ($(RTX_FORWARD_LIB),)
# A stub with TensorRT-RTX's soname and nothing else, made from an empty C file: what the forwarding
# object is linked against, so that its DT_NEEDED entry is libtensorrt_rtx.so.1. It is never installed.
$(RTX_LINK_STUB): | check-trt-headers
	@mkdir -p $(dir $@)
	: > $(dir $@)empty.c
	$(NVCC) -shared -cudart none -Xcompiler -fPIC -Xlinker -soname=libtensorrt_rtx.so.1 -o $@.tmp $(dir $@)empty.c
	mv -f $@.tmp $@

# --no-as-needed around the stub alone: the linker must record it although nothing of it is used.
$(RTX_FORWARD_LIB): $(RTX_FORWARD_SRCS) $(RTX_LINK_STUB) | check-trt-headers
	$(NVCC) -shared -cudart none -Xcompiler -fPIC -Xcompiler -Wall -o $@.tmp $(RTX_FORWARD_SRCS) \
	    -Xlinker -soname=libtensorrt_rtx.so -Xlinker --no-as-needed -Xlinker $(RTX_LINK_STUB) -Xlinker --as-needed
	mv -f $@.tmp $@

$(PLUGIN_INSTALL_DIR)/$(RTX_FORWARD_NAME): $(RTX_FORWARD_LIB)
	@mkdir -p $(dir $@)
	cp -f $< $@.tmp
	mv -f $@.tmp $@
	@echo "installed $@"
endif

$(PLUGIN_INSTALL_DIR)/libdcnconvert_plugin.so: $(PLUGIN_LIB)
	@mkdir -p $(dir $@)
	cp -f $< $@.tmp
	mv -f $@.tmp $@
	@echo "installed $@"

# The harness exports getPluginRegistry (a fake registry) to the plugin it dlopen()s: -rdynamic.
$(HARNESS_BIN): $(HARNESS_SRCS) $(HARNESS_HDRS) $(TRT_HDRS) $(TRT_STAMP) | check-trt-headers
	$(NVCC) $(TRT_CXXFLAGS) -Xcompiler -Wno-deprecated-declarations -I$(CURDIR) -cudart static \
	    -o $@.tmp $(HARNESS_SRCS) -Xlinker -export-dynamic -ldl
	mv -f $@.tmp $@

clean-plugin:
	rm -rf $(PLUGIN_BUILD_DIR) $(BUILD_DIR)/plugin-core

clean: clean-plugin
