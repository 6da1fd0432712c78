/*
 * dcnconvert plugin harness: an IExprBuilder with constants, named symbols and operations whose
 * expressions can be evaluated (for checking the plugin's symbolic output shapes).
 */
#include "harness.h"

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>

namespace harness
{

TestExpr::TestExpr(Kind kind, int64_t value, std::string symbol, nvinfer1::DimensionOperation op, TestExpr const* a,
    TestExpr const* b)
    : mKind(kind)
    , mValue(value)
    , mSymbol(std::move(symbol))
    , mOp(op)
    , mA(a)
    , mB(b)
    , mImplObject(this)
{
    mImpl = &mImplObject;
}

bool TestExpr::Impl::isConstant() const
{
    return mOwner->mKind == Kind::kCONSTANT;
}

int64_t TestExpr::Impl::getConstantValue() const
{
    // TensorRT documents the result for a non-constant as undefined; make misuse visible.
    return mOwner->mKind == Kind::kCONSTANT ? mOwner->mValue : INT64_MIN;
}

namespace
{
int64_t floorDiv(int64_t a, int64_t b)
{
    if (b == 0)
    {
        throw std::runtime_error("division by zero");
    }
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0)))
    {
        --q;
    }
    return q;
}

int64_t apply(nvinfer1::DimensionOperation op, int64_t a, int64_t b)
{
    using Op = nvinfer1::DimensionOperation;
    switch (op)
    {
    case Op::kSUM: return a + b;
    case Op::kPROD: return a * b;
    case Op::kMAX: return a > b ? a : b;
    case Op::kMIN: return a < b ? a : b;
    case Op::kSUB: return a - b;
    case Op::kEQUAL: return a == b ? 1 : 0;
    case Op::kLESS: return a < b ? 1 : 0;
    case Op::kFLOOR_DIV: return floorDiv(a, b);
    case Op::kCEIL_DIV: return -floorDiv(-a, b);
    }
    throw std::runtime_error("unknown DimensionOperation");
}

char const* opName(nvinfer1::DimensionOperation op)
{
    static char const* const kNAMES[] = {"+", "*", "max", "min", "-", "==", "<", "floordiv", "ceildiv"};
    auto const i = static_cast<int32_t>(op);
    return i >= 0 && i < 9 ? kNAMES[i] : "?";
}
} // namespace

int64_t TestExpr::evaluate(std::map<std::string, int64_t> const& bindings) const
{
    switch (mKind)
    {
    case Kind::kCONSTANT: return mValue;
    case Kind::kSYMBOL:
    {
        auto it = bindings.find(mSymbol);
        if (it == bindings.end())
        {
            throw std::runtime_error("unbound symbol " + mSymbol);
        }
        return it->second;
    }
    case Kind::kOPERATION: return apply(mOp, mA->evaluate(bindings), mB->evaluate(bindings));
    }
    throw std::runtime_error("bad expression");
}

std::string TestExpr::text() const
{
    switch (mKind)
    {
    case Kind::kCONSTANT: return std::to_string(mValue);
    case Kind::kSYMBOL: return mSymbol;
    case Kind::kOPERATION: return "(" + mA->text() + " " + opName(mOp) + " " + mB->text() + ")";
    }
    return "?";
}

TestExprBuilder::TestExprBuilder()
    : mImplObject(this)
{
    mImpl = &mImplObject;
}

TestExpr const* TestExprBuilder::add(std::unique_ptr<TestExpr> e)
{
    mExprs.push_back(std::move(e));
    return mExprs.back().get();
}

TestExpr const* TestExprBuilder::symbol(std::string const& name)
{
    return add(std::make_unique<TestExpr>(
        TestExpr::Kind::kSYMBOL, 0, name, nvinfer1::DimensionOperation::kSUM, nullptr, nullptr));
}

TestExpr const* TestExprBuilder::constantExpr(int64_t value)
{
    return add(std::make_unique<TestExpr>(
        TestExpr::Kind::kCONSTANT, value, "", nvinfer1::DimensionOperation::kSUM, nullptr, nullptr));
}

TestExpr const* TestExprBuilder::owned(nvinfer1::IDimensionExpr const* e) const
{
    for (auto const& p : mExprs)
    {
        if (p.get() == e)
        {
            return p.get();
        }
    }
    return nullptr;
}

nvinfer1::IDimensionExpr const* TestExprBuilder::Impl::constant(int64_t value)
{
    return mOwner->constantExpr(value);
}

nvinfer1::IDimensionExpr const* TestExprBuilder::Impl::operation(
    nvinfer1::DimensionOperation op, nvinfer1::IDimensionExpr const& first, nvinfer1::IDimensionExpr const& second)
{
    TestExpr const* a = mOwner->owned(&first);
    TestExpr const* b = mOwner->owned(&second);
    if (a == nullptr || b == nullptr || static_cast<int32_t>(op) < 0 || static_cast<int32_t>(op) > 8)
    {
        return nullptr; // TensorRT returns null for an invalid operation; foreign operands are a plugin bug.
    }
    ++mOwner->nbOperations;
    if (a->kind() == TestExpr::Kind::kCONSTANT && b->kind() == TestExpr::Kind::kCONSTANT)
    {
        return mOwner->constantExpr(apply(op, a->evaluate({}), b->evaluate({}))); // folded, as TensorRT does
    }
    return mOwner->add(std::make_unique<TestExpr>(TestExpr::Kind::kOPERATION, 0, "", op, a, b));
}

} // namespace harness
