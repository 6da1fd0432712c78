/*
 * dcnconvert plugin harness: check bookkeeping and the TensorRT-side objects a plugin reports to
 * (logger, error recorder). The IExprBuilder is in testExprBuilder.cpp, the library loader in
 * pluginLibrary.cpp, fields and shapes of test problems in testProblems.cpp.
 */
#include "harness.h"

#include <cstdio>

namespace harness
{

void Checks::record(bool ok, std::string const& what)
{
    ++total;
    if (!ok)
    {
        ++failed;
    }
    if (!ok || verbose)
    {
        std::printf("%s: %s\n", ok ? "ok" : "FAIL", what.c_str());
        std::fflush(stdout);
    }
}

Checks& checks()
{
    static Checks instance;
    return instance;
}

// --- TestLogger ---

void TestLogger::log(Severity severity, nvinfer1::AsciiChar const* msg) noexcept
{
    entries.push_back({severity, msg != nullptr ? msg : "(null)"});
    if (!quiet)
    {
        static char const* const kTAGS[] = {"F", "E", "W", "I", "V"};
        auto const s = static_cast<int32_t>(severity);
        std::printf("  log[%s] %s\n", s >= 0 && s < 5 ? kTAGS[s] : "?", entries.back().text.c_str());
        std::fflush(stdout);
    }
}

int32_t TestLogger::count(Severity severity) const
{
    int32_t n = 0;
    for (auto const& e : entries)
    {
        n += e.severity == severity ? 1 : 0;
    }
    return n;
}

std::vector<std::string> TestLogger::errorsSince(size_t mark) const
{
    std::vector<std::string> out;
    for (size_t i = mark; i < entries.size(); ++i)
    {
        if (entries[i].severity == Severity::kERROR || entries[i].severity == Severity::kINTERNAL_ERROR)
        {
            out.push_back(entries[i].text);
        }
    }
    return out;
}

// --- TestErrorRecorder ---

int32_t TestErrorRecorder::getNbErrors() const noexcept
{
    return static_cast<int32_t>(errors.size());
}

nvinfer1::ErrorCode TestErrorRecorder::getErrorCode(int32_t errorIdx) const noexcept
{
    return errorIdx >= 0 && errorIdx < getNbErrors() ? errors[errorIdx].first : nvinfer1::ErrorCode::kINVALID_ARGUMENT;
}

TestErrorRecorder::ErrorDesc TestErrorRecorder::getErrorDesc(int32_t errorIdx) const noexcept
{
    return errorIdx >= 0 && errorIdx < getNbErrors() ? errors[errorIdx].second.c_str() : "";
}

bool TestErrorRecorder::hasOverflowed() const noexcept
{
    return false;
}

void TestErrorRecorder::clear() noexcept
{
    errors.clear();
}

bool TestErrorRecorder::reportError(nvinfer1::ErrorCode val, ErrorDesc desc) noexcept
{
    errors.emplace_back(val, desc != nullptr ? desc : "(null)");
    std::printf("  recorder[%d] %s\n", static_cast<int32_t>(val), errors.back().second.c_str());
    std::fflush(stdout);
    return true;
}

TestErrorRecorder::RefCount TestErrorRecorder::incRefCount() noexcept
{
    return ++refCount;
}

TestErrorRecorder::RefCount TestErrorRecorder::decRefCount() noexcept
{
    return --refCount;
}

} // namespace harness
