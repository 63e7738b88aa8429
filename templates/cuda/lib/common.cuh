/* Shared by the library kernel families that take YlArgs (emitted before
 * each by compiler/lib_kernels.c; the detection loss has its own block):
 * the grid-stride loop over a.total elements, one per thread, and an
 * element index split over [images][c][h][w]. */
#define YL_EACH(i) for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < a.total; i += (long long)gridDim.x * blockDim.x)
/* n: image, r: offset within the image, ch: channel, p: offset within the
 * plane, y and x: its row and column */
struct YlPix {
    long long n, r, ch, p, y, x;
};
__device__ __forceinline__ YlPix yl_pix(long long i, long long c, long long h, long long w) {
    const long long plane = h * w, per = c * plane, n = i / per, r = i - n * per, ch = r / plane, p = r - ch * plane, y = p / w;
    return YlPix{n, r, ch, p, y, p - y * w};
}
