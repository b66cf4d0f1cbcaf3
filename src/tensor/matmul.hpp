#pragma once
// Linear layer with PyTorch's weight layout: out = in @ w^T + b. The GEMMs go to the vendor BLAS.
#include <type_traits>

#include "tensor/column_sum.hpp"
#include "tensor/gemm.hpp"
#include "tensor/team_reduce.hpp"
#include "tensor/traffic.hpp"
#include "tensor/views.hpp"

namespace gpt2 {

// db (OC) += sum_n dout (N,OC)
template <class T>
void bias_backward(Vec<T> db, CMat<T> dout) {
  count_traffic(bytes_of(dout, db), bytes_of(db));
  column_sum<T>("bias_backward", db, dout.extent(0), dout.extent(1),
                KOKKOS_LAMBDA(int n, int o) { return dout(n, o); });
}

// out (N,OC) += b (OC) [+ residual (N,OC)]; either may be empty.
template <class T>
void add_bias_residual(Mat<T> out, CVec<T> b, CMat<T> residual = {}) {
  // One team per row, columns contiguous: the host loop vectorizes (an MDRange tiling does not).
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = Policy::member_type;
  const int N = out.extent(0), OC = out.extent(1);
  const bool has_b = b.extent(0) != 0, has_r = residual.extent(0) != 0;
  if (!has_b && !has_r) return;
  count_traffic(bytes_of(out, b, residual), bytes_of(out));
  Kokkos::parallel_for(
      "matmul_bias_residual", team_policy<ExecSpace>(N), KOKKOS_LAMBDA(const Member& team) {
        const int n = team.league_rank();
        T* row = &out(n, 0);
        if (has_b && has_r) {
          const T* r = &residual(n, 0);
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, OC), [&](int o) { row[o] += b(o) + r[o]; });
        } else if (has_b) {
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, OC), [&](int o) { row[o] += b(o); });
        } else {
          const T* r = &residual(n, 0);
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, OC), [&](int o) { row[o] += r[o]; });
        }
      });
}

// The bias and residual a product adds in its own call (gemm.hpp); null where empty.
inline GemmEpilogue epilogue_of(CVec<float> b, CMat<float> residual) {
  return {b.extent(0) ? b.data() : nullptr, residual.extent(0) ? residual.data() : nullptr};
}

// out (N,OC) = in (N,C) @ w (OC,C)^T + b (OC) [+ residual (N,OC)]
// b may be empty (no bias). Both are added inside the product where the library can (fp32 on oneDNN),
// else in one pass after it.
template <class T>
void matmul_forward(Mat<T> out, CMat<T> in, CMat<T> w, CVec<T> b, CMat<T> residual = {}) {
  const int N = in.extent(0), C = in.extent(1), OC = w.extent(0);
  if constexpr (std::is_same_v<T, float>) {
    if (gemm_fuses_epilogue() && (b.extent(0) || residual.extent(0)))
      return gemm_with_epilogue(N, OC, C, in.data(), C, w.data(), C, out.data(), OC, epilogue_of(b, residual));
  }
  gemm<T>(Op::N, Op::T, N, OC, C, T(1), in.data(), C, w.data(), C, T(0), out.data(), OC);
  add_bias_residual<T>(out, b, residual);
}

// The backward in two halves, so that a pipeline can send the input gradient on at once and compute
// the weight gradient later (zero-bubble schedules); together they are matmul_backward.
// din (N,C) = dout (N,OC) @ w (OC,C)   (or += when accumulate_din)
template <class T>
void matmul_backward_input(Mat<T> din, CMat<T> dout, CMat<T> w, bool accumulate_din = false) {
  const int N = dout.extent(0), C = w.extent(1), OC = w.extent(0);
  gemm<T>(Op::N, Op::N, N, C, OC, T(1), dout.data(), OC, w.data(), C, accumulate_din ? T(1) : T(0), din.data(), C);
}
// dw (OC,C) += dout^T @ in (N,C) (store: =, dw's zeros not read);   db (OC) += colsum(dout), when
// db is not empty
template <class T>
void matmul_backward_weight(Mat<T> dw, Vec<T> db, CMat<T> dout, CMat<T> in, bool store = false) {
  const int N = in.extent(0), C = in.extent(1), OC = dw.extent(0);
  gemm<T>(Op::T, Op::N, OC, C, N, T(1), dout.data(), OC, in.data(), C, store ? T(0) : T(1), dw.data(), C);
  if (db.extent(0) != 0) bias_backward<T>(db, dout);
}

// din (N,C) = dout @ w   (or += when accumulate_din);   dw (OC,C) += dout^T @ in;   db (OC) += colsum
// din may be empty (the caller does not need it); db may be empty (no bias).
template <class T>
void matmul_backward(Mat<T> din, Mat<T> dw, Vec<T> db, CMat<T> dout, CMat<T> in, CMat<T> w,
                     bool accumulate_din = false) {
  if (din.extent(0) != 0) matmul_backward_input<T>(din, dout, w, accumulate_din);
  matmul_backward_weight<T>(dw, db, dout, in);
}

}  // namespace gpt2
