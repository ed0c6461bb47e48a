/* tests/fuzz/fuzz_narration.c - narration CSVs, "video_id,start_s,end_s,text" rows (--format
 * narration): the input is the file, checked by tbf_annotations (fuzz_ann.c).
 * Seeds: corpus/narration (make_seeds.sh). */
#include "fuzz.h"
#include "fuzz_ann.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    tbf_quiet_log();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tbf_annotations(data, size, TB_ANN_NARRATION);
    return 0;
}
