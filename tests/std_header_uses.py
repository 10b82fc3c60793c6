"""Statements that use each standard header's names: compiled under NVRTC
(tests/unit/test_cuda_std_headers.py) and run on every backend
(tests/backend/test_std_headers.py)."""

# header -> a statement using its names (y: float*, x: const float*)
USES = {
    "cmath": "y[0] = std::sqrt(x[0]) + std::exp(x[1]) + std::fabs(x[2]) "
    "+ (std::isnan(x[3]) ? 1 : 0);",
    "math.h": "y[0] = sqrtf(x[0]) + expf(x[1]) + fmaxf(x[2], 0.f) + (isinf(x[3]) ? 1.f : 0.f);",
    "cstdint": "std::int64_t a = 1; std::uint8_t b = 2; int32_t c = 3; uint64_t d = 4; "
    "y[0] = a + b + c + d + INT64_MAX / 1e18f + UINT8_MAX;",
    "stdint.h": "int64_t a = INT32_MAX; uint16_t b = UINT16_MAX; y[0] = float(a + b);",
    "cfloat": "y[0] = FLT_MAX + FLT_EPSILON + float(DBL_MAX > 1.0) + FLT_MIN;",
    "float.h": "y[0] = -FLT_MAX + FLT_MANT_DIG;",
    "climits": "y[0] = float(INT_MAX) + float(INT_MIN) + UINT_MAX + CHAR_BIT + LLONG_MAX;",
    "limits.h": "y[0] = float(SHRT_MAX) + float(LONG_MIN);",
    "limits": "y[0] = std::numeric_limits<float>::max() + std::numeric_limits<float>::lowest()"
    " + std::numeric_limits<float>::infinity() + std::numeric_limits<int>::max()"
    " + std::numeric_limits<float>::epsilon() + std::numeric_limits<double>::quiet_NaN();",
    "type_traits": "using T = std::remove_cv_t<const float>; "
    "static_assert(std::is_same_v<T, float> && std::is_floating_point<T>::value); "
    "y[0] = std::is_integral_v<int> + std::conditional_t<true, float, int>(1.5f) "
    "+ std::enable_if_t<std::is_signed_v<int>, int>(2);",
    "utility": "float a = x[0], b = x[1]; std::swap(a, b); auto p = std::make_pair(a, 1); "
    "y[0] = p.first + std::move(b) + std::forward<float>(a);",
    "cassert": "assert(x[0] >= 0.f); y[0] = x[0];",
    "assert.h": "assert(x[0] == x[0]); y[0] = x[0];",
    "cstddef": "std::size_t n = 1; size_t m = 2; std::ptrdiff_t d = -1; ptrdiff_t e = 1; "
    "y[0] = float(n + m + d + e) + (nullptr == static_cast<float*>(NULL) ? 1.f : 0.f);",
    "stddef.h": "size_t n = sizeof(float); ptrdiff_t d = 3; y[0] = float(n) + float(d);",
    "cstdlib": "y[0] = float(std::abs(-3) + abs(-4) + std::llabs(-5LL));",
    "stdlib.h": "y[0] = float(abs(-3) + labs(-4L));",
    "cstdio": 'printf("x = %f\\n", x[0]); std::printf("%d\\n", 1); y[0] = x[0];',
    "stdio.h": 'printf("x = %f\\n", x[0]); y[0] = x[0];',
    "algorithm": "y[0] = std::max(x[0], x[1]) + std::min(x[2], 1.0f) + std::max({1, 2, 3})"
    " + std::clamp(x[3], 0.f, 1.f) + max(x[0], 2.f) + min(1, 2);",
    "cstring": "float a; memcpy(&a, x, sizeof a); std::memset(y, 0, 4); y[0] = a;",
    "array": "std::array<float, 2> a{x[0], x[1]}; y[0] = a[0] + a.size();",
    "tuple": "auto t = std::make_tuple(x[0], 1); y[0] = std::get<0>(t) + std::get<1>(t);",
    "functional": "y[0] = std::plus<float>()(x[0], x[1]) + std::multiplies<>()(2.f, x[0]);",
    "numeric": "y[0] = float(std::gcd(12, 18) + std::lcm(4, 6));",
    "cuda.h": "y[0] = float(CUDA_VERSION >= 12000);",
    "cuda_runtime.h": "y[0] = __fsqrt_rn(x[0]) + float(CUDART_VERSION >= 12000);",
}
