// Matrix transpose through a padded shared-memory tile, both sides coalesced.
#define TILE_DIM 32
#define BLOCK_ROWS 8

__global__ void transpose_tiled(float* odata, const float* idata, int width, int height) {
    __shared__ float tile[TILE_DIM][TILE_DIM + 1];
    int xIndex = blockIdx.x * TILE_DIM + threadIdx.x;
    int yIndex = blockIdx.y * TILE_DIM + threadIdx.y;
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS) {
        if (xIndex < width && yIndex + j < height)
            tile[threadIdx.y + j][threadIdx.x] = idata[(yIndex + j) * width + xIndex];
    }
    __syncthreads();
    xIndex = blockIdx.y * TILE_DIM + threadIdx.x;
    yIndex = blockIdx.x * TILE_DIM + threadIdx.y;
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS) {
        if (xIndex < height && yIndex + j < width)
            odata[(yIndex + j) * height + xIndex] = tile[threadIdx.x][threadIdx.y + j];
    }
}
