/* runtime/predict/sources.h — the image and video files a `yolort predict --source`
 * names, listed as Ultralytics' LoadImagesAndVideos lists them: a file, a
 * directory, a glob pattern, or a .txt/.csv file of such entries. Owns only
 * the listing; nothing is decoded here. */
#ifndef YOLOCC_SOURCES_H
#define YOLOCC_SOURCES_H
#include <stdbool.h>

typedef struct Sources {
    char **path;    /* absolute paths, in Ultralytics' order: images, then videos */
    int n, n_images;
} Sources;

/* Fails with one line in err when an entry does not exist or no image or
 * video is found; *s is then empty. */
bool sources_list(const char *source, Sources *s, char *err, int errcap);
void sources_free(Sources *s);

#endif
