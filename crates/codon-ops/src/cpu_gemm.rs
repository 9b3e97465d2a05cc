//! Bounds-checked f32 matrix products on the `gemm` crate, for the fused CPU kernels.
//!
//! A [`Mat`] is a strided view into a slice, so transposed operands and one head's columns
//! of a (tokens × hidden) activation are multiplied in place, without a copy.

use candle_core::Result;

/// A (rows × cols) f32 matrix inside a slice: element (i, j) is at `i·row_stride + j·col_stride`.
#[derive(Clone, Copy)]
pub struct Mat<'a> {
    data: &'a [f32],
    rows: usize,
    cols: usize,
    row_stride: usize,
    col_stride: usize,
}

impl<'a> Mat<'a> {
    /// A row-major matrix whose rows are `row_stride` apart (`row_stride ≥ cols`).
    pub fn rows(data: &'a [f32], rows: usize, cols: usize, row_stride: usize) -> Self {
        Self { data, rows, cols, row_stride, col_stride: 1 }
    }

    /// The transposed view.
    pub fn t(self) -> Self {
        Self { rows: self.cols, cols: self.rows, row_stride: self.col_stride, col_stride: self.row_stride, ..self }
    }

    /// Whether every element lies inside the slice.
    fn in_bounds(&self) -> bool {
        self.rows == 0
            || self.cols == 0
            || (self.rows - 1) * self.row_stride + (self.cols - 1) * self.col_stride < self.data.len()
    }
}

/// `dst ← a·b·beta` (or `dst += a·b·beta` when `accumulate`), dst row-major with rows
/// `dst_row_stride` apart. `parallel` splits the product over rayon's threads; kernels
/// that already run one task per thread pass false.
pub fn matmul_into(
    dst: &mut [f32],
    dst_row_stride: usize,
    a: Mat<'_>,
    b: Mat<'_>,
    beta: f32,
    accumulate: bool,
    parallel: bool,
) -> Result<()> {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    let dst_fits = m == 0 || n == 0 || (m - 1) * dst_row_stride + n <= dst.len();
    if b.rows != k || !a.in_bounds() || !b.in_bounds() || !dst_fits || (m > 1 && n > dst_row_stride) {
        candle_core::bail!(
            "cpu gemm: ({m}×{k})·({}×{n}) into {} elements with row stride {dst_row_stride}",
            b.rows,
            dst.len()
        );
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        if !accumulate {
            dst.chunks_mut(dst_row_stride).take(m).for_each(|row| row[..n].fill(0.0));
        }
        return Ok(());
    }
    let threads = rayon::current_num_threads();
    let strips = if parallel { column_strips(n, threads) } else { 1 };
    if strips <= 1 {
        let parallelism =
            if parallel && threads > 1 { gemm::Parallelism::Rayon(threads) } else { gemm::Parallelism::None };
        // SAFETY: the checks above keep every element of a, b and dst inside its slice, and dst
        // (a unique borrow) cannot overlap a or b.
        unsafe { gemm_strip(dst.as_mut_ptr(), dst_row_stride, a, b, 0, n, beta, accumulate, parallelism) };
        return Ok(());
    }
    let dst_addr = dst.as_mut_ptr() as usize;
    rayon::scope(|scope| {
        for strip in 0..strips {
            // The first n % strips strips take one column more (no n·strip product to overflow).
            let (width, extra) = (n / strips, n % strips);
            let from = strip * width + strip.min(extra);
            let to = from + width + usize::from(strip < extra);
            scope.spawn(move |_| {
                // SAFETY: as above; the strips' columns are disjoint, so no two tasks write the
                // same element of dst, and dst outlives the scope.
                unsafe {
                    gemm_strip(
                        dst_addr as *mut f32,
                        dst_row_stride,
                        a,
                        b,
                        from,
                        to,
                        beta,
                        accumulate,
                        gemm::Parallelism::None,
                    )
                };
            });
        }
    });
    Ok(())
}

/// Fewest columns a thread's strips hold in all: narrower, and each strip repacks a's rows too
/// often to win.
const MIN_THREAD_COLUMNS: usize = 96;

/// The strip width the model's shapes ran best at (192 columns: the strip's part of b stays in
/// cache).
const STRIP_COLUMNS: usize = 192;

/// How many column strips a product with `n` columns runs as, each one single-threaded `gemm`
/// (a whole multiple of the threads, so they finish together), or 1 to leave the threading to
/// `gemm`. Strips beat `gemm`'s own split on the model's shapes (AMD EPYC Zen 4, 2 threads,
/// `gemm_throughput`): 352×3072·3072×768 at 149 against 105 GFLOP/s, 352×768·768×768 at 165
/// against 141, 2048×3072·3072×768 at 201 against 162. A product whose threads would get
/// under [`MIN_THREAD_COLUMNS`] columns each keeps `gemm`'s split (the model's 768-column
/// layers beyond 8 threads); only 2 threads were measured.
fn column_strips(n: usize, threads: usize) -> usize {
    if threads > 1 && n / threads >= MIN_THREAD_COLUMNS {
        threads * (n / (threads * STRIP_COLUMNS)).max(1)
    } else {
        1
    }
}

/// `gemm` on columns `from..to` of the product `a·b` into dst (row-major, rows `dst_row_stride` apart).
///
/// # Safety
/// `dst` must address the (a.rows × b.cols) product with rows `dst_row_stride` apart, writable and
/// not overlapping a or b, and no other thread may touch columns `from..to` meanwhile.
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_strip(
    dst: *mut f32,
    dst_row_stride: usize,
    a: Mat<'_>,
    b: Mat<'_>,
    from: usize,
    to: usize,
    beta: f32,
    accumulate: bool,
    parallelism: gemm::Parallelism,
) {
    // SAFETY: the caller's contract; column `from` of b and of dst lie inside their buffers.
    unsafe {
        gemm::gemm(
            a.rows,
            to - from,
            a.cols,
            dst.add(from),
            1,
            dst_row_stride as isize,
            accumulate,
            a.data.as_ptr(),
            a.col_stride as isize,
            a.row_stride as isize,
            b.data.as_ptr().add(from * b.col_stride),
            b.col_stride as isize,
            b.row_stride as isize,
            1.0,
            beta,
            false,
            false,
            false,
            parallelism,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
        let mut out = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                out[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
            }
        }
        out
    }

    #[test]
    fn transposed_and_strided_operands_match_a_naive_product() {
        let (m, k, n) = (5, 7, 3);
        let a: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i as f32 * 0.11).cos()).collect();
        let expected = naive(&a, &b, m, k, n);
        // aᵀ stored row-major, read back transposed; b embedded in wider rows.
        let at: Vec<f32> = (0..k * m).map(|i| a[(i % m) * k + i / m]).collect();
        let wide: Vec<f32> =
            (0..k * (n + 2)).map(|i| if i % (n + 2) < n { b[(i / (n + 2)) * n + i % (n + 2)] } else { 9.0 }).collect();
        let mut dst = vec![1f32; m * n];
        matmul_into(&mut dst, n, Mat::rows(&at, k, m, m).t(), Mat::rows(&wide, k, n, n + 2), 2.0, true, false).unwrap();
        for (d, e) in dst.iter().zip(&expected) {
            assert!((d - (1.0 + 2.0 * e)).abs() < 1e-5);
        }
        // A view that runs past its slice is refused, not read.
        assert!(
            matmul_into(&mut dst, n, Mat::rows(&a[1..], m, k, k), Mat::rows(&b, k, n, n), 1.0, false, true).is_err()
        );
    }

    #[test]
    fn column_strips_are_whole_multiples_of_the_threads_and_never_narrow() {
        assert_eq!(column_strips(768, 2), 4);
        assert_eq!(column_strips(3072, 2), 16);
        assert_eq!(column_strips(300, 2), 2);
        // Too few columns per thread: gemm's own split.
        assert_eq!(column_strips(768, 32), 1);
        assert_eq!(column_strips(150, 2), 1);
        assert_eq!(column_strips(3072, 1), 1);
    }

    #[test]
    fn a_product_split_into_column_strips_matches_a_naive_product() {
        // Wide enough to run as strips on two or more threads; a transposed b and a dst with
        // wider rows, accumulated, as the linear layers call it.
        let (m, k, n) = (37, 29, 4 * MIN_THREAD_COLUMNS + 5);
        let a: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i as f32 * 0.11).cos()).collect();
        let expected = naive(&a, &b, m, k, n);
        let bt: Vec<f32> = (0..n * k).map(|i| b[(i % k) * n + i / k]).collect();
        let stride = n + 3;
        let mut dst = vec![1f32; m * stride];
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        assert!(pool.install(|| column_strips(n, rayon::current_num_threads())) > 1);
        pool.install(|| {
            matmul_into(&mut dst, stride, Mat::rows(&a, m, k, k), Mat::rows(&bt, n, k, k).t(), 0.5, true, true)
        })
        .unwrap();
        for i in 0..m {
            for j in 0..stride {
                let want = if j < n { 1.0 + 0.5 * expected[i * n + j] } else { 1.0 };
                assert!((dst[i * stride + j] - want).abs() < 1e-4, "({i}, {j}): {} vs {want}", dst[i * stride + j]);
            }
        }
    }
}
