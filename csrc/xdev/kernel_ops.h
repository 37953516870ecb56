// The element-wise operations of the xdev kernels (kernels.cc, kernels_reduce_copy.cc):
// apply(a, b) for sum, prod, max, min and the bitwise ops. Max is a < b ? b : a and min
// b < a ? b : a, which is what the vector loops (kernels_vector.cc) give too.
#pragma once

namespace xdev {
namespace ops {

struct OpSum {
  template <typename T>
  static T apply(T a, T b) {
    return a + b;
  }
};
struct OpProd {
  template <typename T>
  static T apply(T a, T b) {
    return a * b;
  }
};
struct OpMax {
  template <typename T>
  static T apply(T a, T b) {
    return a < b ? b : a;
  }
};
struct OpMin {
  template <typename T>
  static T apply(T a, T b) {
    return b < a ? b : a;
  }
};
struct OpBand {
  template <typename T>
  static T apply(T a, T b) {
    return a & b;
  }
};
struct OpBor {
  template <typename T>
  static T apply(T a, T b) {
    return a | b;
  }
};
struct OpBxor {
  template <typename T>
  static T apply(T a, T b) {
    return a ^ b;
  }
};

}  // namespace ops
}  // namespace xdev
