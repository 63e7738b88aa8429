/* runtime/data/video_io.h — video files through FFmpeg's libraries
 * (libavformat, libavcodec, libswscale): frames decoded to RGB Images as
 * OpenCV's VideoCapture delivers them, and frames encoded as Motion JPEG in
 * an AVI file as OpenCV's VideoWriter with fourcc MJPG writes them. Owns only
 * the containers and codecs; no letterbox, no model. */
#ifndef YOLOCC_VIDEO_IO_H
#define YOLOCC_VIDEO_IO_H
#include <stdbool.h>

#include "image.h"

typedef struct VideoReader VideoReader;

/* Opens path's best video stream. *fps is int(CAP_PROP_FPS) (the stream's
 * average frame rate, truncated) and *frames CAP_PROP_FRAME_COUNT (the
 * container's count, else duration x rate rounded), as OpenCV reports them.
 * NULL with err when the file cannot be opened or holds no decodable video. */
VideoReader *video_open(const char *path, int *w, int *h, int *fps, int *frames, char *err, int errcap);
/* The next frame as RGB into *im (allocated here): 1, or 0 at the end of
 * the stream, or -1 with err on a decoding error. */
int video_read(VideoReader *v, Image *im, char *err, int errcap);
void video_close(VideoReader *v);

typedef struct VideoWriter VideoWriter;

/* An AVI of Motion JPEG frames (yuvj420p) at fps frames a second, w x h. */
VideoWriter *video_writer_open(const char *path, int w, int h, int fps, char *err, int errcap);
/* Appends one RGB frame of the writer's size. */
bool video_writer_put(VideoWriter *v, const Image *im, char *err, int errcap);
/* Flushes, writes the index and closes; false with err when that fails.
 * Frees v either way (NULL is a no-op, true). */
bool video_writer_close(VideoWriter *v, char *err, int errcap);

#endif
