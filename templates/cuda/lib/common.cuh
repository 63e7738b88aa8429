/* Shared by the library kernel families that take YlArgs (emitted before
 * each by compiler/lib_kernels.c; the detection loss has its own block):
 * the grid-stride loop over a.total elements, one per thread, and an
 * element index split over an image's [c][h][w] or, channels last, [h][w][c]. */
#define YL_EACH(i) for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < a.total; i += (long long)gridDim.x * blockDim.x)
/* n: image, r: offset within the image as stored, ch: channel, p: offset
 * within the plane, y and x: its row and column */
struct YlPix {
    long long n, r, ch, p, y, x;
};
/* Element i in storage order of an image stack of c channels over h x w
 * planes, NCHW or (cl) channels last, so consecutive threads write
 * consecutive addresses either way. */
__device__ __forceinline__ YlPix yl_pix(long long i, bool cl, long long c, long long h, long long w) {
    const long long plane = h * w, per = c * plane, n = i / per, r = i - n * per;
    const long long ch = cl ? r % c : r / plane, p = cl ? r / c : r - ch * plane, y = p / w;
    return YlPix{n, r, ch, p, y, p - y * w};
}
/* Offset within an image of channel ch at plane offset p. */
__device__ __forceinline__ long long yl_at(bool cl, long long ch, long long p, long long c, long long plane) { return cl ? p * c + ch : ch * plane + p; }
/* Offset within its image of operand s's channel ch at plane offset p: a
 * channels-last operand's pixels sit a.ps[s] apart (a channel slice of a
 * wider tensor: the base's channels). */
__device__ __forceinline__ long long yl_pos(const YlArgs &a, int s, long long ch, long long p, long long plane) {
    return yl_at((a.cl >> s) & 1, ch, p, a.ps[s], plane);
}
