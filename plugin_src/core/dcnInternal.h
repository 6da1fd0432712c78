/*
 * dcnconvert core: helpers shared by the core's translation units (dcnValidate.cu, dcnForward.cu).
 * Internal to plugin_src/core (not part of the C API, no TensorRT include).
 */
#ifndef DCN_CORE_INTERNAL_H
#define DCN_CORE_INTERNAL_H

#include "dcnParams.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* `make core` exports the C API from libdcnconvert_core.so; the plugin build defines this empty
 * (with -fvisibility=hidden) so that the plugin library exports only its TensorRT entry points. */
#ifndef DCN_CORE_EXPORT
#define DCN_CORE_EXPORT __attribute__((visibility("default")))
#endif

namespace dcn
{
namespace detail
{

/* vsnprintf into msg when msg is not NULL and msgLen > 0. */
inline void setMsg(char* msg, size_t msgLen, char const* fmt, ...)
{
    if (msg == nullptr || msgLen == 0)
    {
        return;
    }
    va_list args;
    va_start(args, fmt);
    vsnprintf(msg, msgLen, fmt, args);
    va_end(args);
}

inline char const* dtypeName(int32_t t)
{
    switch (t)
    {
    case kDCN_FLOAT32: return "FLOAT32";
    case kDCN_FLOAT16: return "FLOAT16";
    case kDCN_BFLOAT16: return "BFLOAT16";
    default: return "unknown";
    }
}

} // namespace detail
} // namespace dcn

#endif /* DCN_CORE_INTERNAL_H */
