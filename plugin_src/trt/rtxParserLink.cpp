/*
 * dcnconvert, TensorRT-RTX build only: the forwarding object that lets TensorRT-RTX's ONNX parser open
 * libtensorrt_rtx.so.
 *
 * TensorRT-RTX 1.7's parser dlopen()s the unversioned "libtensorrt_rtx.so" when it imports a plugin
 * node; its wheel ships only libtensorrt_rtx.so.1, and the parser does not survive the failure (the
 * process aborts). The forwarding object (trt/rtxForwardObject.c) has the soname libtensorrt_rtx.so and
 * needs libtensorrt_rtx.so.1. Once it is loaded, glibc's dlopen of that bare name returns it (a loaded
 * object whose soname matches is used before any folder is searched), and the parser's symbol lookups
 * through it reach the real library through its DT_NEEDED entry. Measured with TensorRT-RTX 1.7.1 on CPU:
 * loaded RTLD_LOCAL, an engine builds; loaded RTLD_GLOBAL, the build returned no engine; an object
 * without the DT_NEEDED entry, the parser still aborts.
 *
 * Nothing is loaded where libtensorrt_rtx.so.1 is not (the parser is not in the process, or not yet), or
 * where libtensorrt_rtx.so already resolves to a loaded library (a folder with the link first on
 * LD_LIBRARY_PATH, as dcnconvert's own builds have), so the forwarding object never pulls a second copy
 * of TensorRT-RTX from disk.
 */
#include "rtxParserLink.h"

#if defined(DCN_RUNTIME_TENSORRT_RTX)

#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <dlfcn.h>
#include <string>
#include <unistd.h>

namespace dcnconvert
{
namespace trt
{
namespace
{

//! True when `name` resolves to a library already loaded in this process (nothing is loaded here).
bool loaded(char const* name)
{
    void* handle = dlopen(name, RTLD_NOLOAD | RTLD_LAZY);
    if (handle == nullptr)
    {
        return false;
    }
    dlclose(handle); // drops only the reference RTLD_NOLOAD added
    return true;
}

std::string folderOf(std::string const& path)
{
    std::string::size_type const slash = path.rfind('/');
    return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

//! The forwarding object's path: beside this library as it was loaded, else beside the file that path
//! resolves to (a library reached through a symbolic link). The first candidate when neither exists.
std::string forwarderPath(std::string const& library)
{
    std::string const beside = folderOf(library) + "/" + kRTX_FORWARD_FILE;
    if (access(beside.c_str(), F_OK) == 0)
    {
        return beside;
    }
    char resolved[PATH_MAX];
    if (realpath(library.c_str(), resolved) != nullptr)
    {
        std::string const real = folderOf(resolved) + "/" + kRTX_FORWARD_FILE;
        if (access(real.c_str(), F_OK) == 0)
        {
            return real;
        }
    }
    return beside;
}

void warnOnce(std::string const& what)
{
    static std::atomic<bool> told{false};
    if (!told.exchange(true))
    {
        std::fprintf(stderr,
            "[dcnconvert] warning: %s: TensorRT-RTX's ONNX parser will abort the process on plugin nodes unless a "
            "folder holding libtensorrt_rtx.so -> libtensorrt_rtx.so.1 is first on LD_LIBRARY_PATH\n",
            what.c_str());
    }
}

} // namespace

void linkRtxForParser() noexcept
{
    try
    {
        if (!loaded("libtensorrt_rtx.so.1") || loaded("libtensorrt_rtx.so"))
        {
            return;
        }
        Dl_info self{};
        if (dladdr(reinterpret_cast<void*>(&linkRtxForParser), &self) == 0 || self.dli_fname == nullptr)
        {
            warnOnce(std::string("cannot tell this library's folder, so ") + kRTX_FORWARD_FILE + " was not loaded");
            return;
        }
        std::string const path = forwarderPath(self.dli_fname);
        if (access(path.c_str(), F_OK) != 0)
        {
            warnOnce(path + " is missing (it ships beside " + self.dli_fname + ")");
            return;
        }
        // Kept loaded for the life of the process: the parser may open libtensorrt_rtx.so at any time.
        if (dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL) == nullptr)
        {
            char const* why = dlerror();
            warnOnce("cannot load " + path + " (" + (why != nullptr ? why : "unknown error") + ")");
        }
    }
    catch (...)
    {
        // Out of memory building a message: the parser may then abort on plugin nodes, nothing else changes.
    }
}

} // namespace trt
} // namespace dcnconvert

#endif // DCN_RUNTIME_TENSORRT_RTX
