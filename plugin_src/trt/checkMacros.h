/*
 * dcnconvert TensorRT glue: error type, validation macros and message routing.
 *
 * Rules (plugin_src/README.md, "Error handling"): validation throws DcnError from inside a
 * try block; every noexcept entry point catches and reports through reportError(), which goes to
 * the IErrorRecorder of the attached context when there is one, else to the TensorRT logger
 * found through setLoggerFinder(), else (errors only) to stderr. Nothing aborts or exits.
 */
#ifndef DCN_TRT_CHECK_MACROS_H
#define DCN_TRT_CHECK_MACROS_H

#include "NvInferRuntime.h"

#include <cuda_runtime_api.h>

#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace dcnconvert
{
namespace trt
{

//! An error raised by the glue; `code` is what an IErrorRecorder receives.
class DcnError : public std::runtime_error
{
public:
    DcnError(nvinfer1::ErrorCode code, std::string const& message)
        : std::runtime_error(message)
        , mCode(code)
    {
    }

    nvinfer1::ErrorCode code() const noexcept
    {
        return mCode;
    }

private:
    nvinfer1::ErrorCode mCode;
};

//! Sends a message to the TensorRT logger set through setLoggerFinder(). Without one, messages of
//! severity kERROR or worse go to stderr and the rest are dropped. Never throws.
void logMessage(nvinfer1::ILogger::Severity severity, std::string const& message) noexcept;

//! Reports an error to `recorder` when it is not null, else logs it with severity kERROR.
void reportError(nvinfer1::IErrorRecorder* recorder, nvinfer1::ErrorCode code, std::string const& message) noexcept;

//! Reports the exception caught by a noexcept entry point (DcnError keeps its code; anything else
//! is kINTERNAL_ERROR) as "ModulatedDeformConv2d (dcnconvert) layer '<layer>': <method>: <what>".
void reportException(
    nvinfer1::IErrorRecorder* recorder, char const* layer, char const* method, std::exception const& e) noexcept;

} // namespace trt
} // namespace dcnconvert

//! Throws DcnError(kINVALID_ARGUMENT) with the streamed message when `cond` is false, e.g.
//! DCN_VALIDATE(stride >= 1, "field 'stride' must be >= 1, got " << stride).
#define DCN_VALIDATE(cond, msg) DCN_VALIDATE_CODE(cond, nvinfer1::ErrorCode::kINVALID_ARGUMENT, msg)

#define DCN_VALIDATE_CODE(cond, errorCode, msg)                                                                        \
    do                                                                                                                 \
    {                                                                                                                  \
        static_assert(!std::is_convertible<decltype((cond)), char const*>::value,                                     \
            "DCN_VALIDATE: the condition must not be a string; put the message in the second argument");             \
        if (!(cond))                                                                                                   \
        {                                                                                                              \
            std::ostringstream dcnMessage_;                                                                            \
            dcnMessage_ << msg;                                                                                        \
            throw ::dcnconvert::trt::DcnError((errorCode), dcnMessage_.str());                                        \
        }                                                                                                              \
    } while (0)

//! Throws DcnError(kFAILED_EXECUTION) naming the call and the CUDA error when `call` fails.
#define DCN_CHECK_CUDA(call)                                                                                           \
    do                                                                                                                 \
    {                                                                                                                  \
        cudaError_t const dcnStatus_ = (call);                                                                         \
        if (dcnStatus_ != cudaSuccess)                                                                                 \
        {                                                                                                              \
            std::ostringstream dcnMessage_;                                                                            \
            dcnMessage_ << #call << " failed: " << cudaGetErrorName(dcnStatus_) << ": "                                \
                        << cudaGetErrorString(dcnStatus_);                                                             \
            throw ::dcnconvert::trt::DcnError(nvinfer1::ErrorCode::kFAILED_EXECUTION, dcnMessage_.str());             \
        }                                                                                                              \
    } while (0)

#endif // DCN_TRT_CHECK_MACROS_H
