"""Battery cases whose fault another test checks: that test, and not the case.

Each names the test (path::function, from the repository root) that checks
the same fault, most of them in this process and cheaper than a command line
of their own. A case named here is left out of the battery (without());
test_classifier.py checks that each test named exists.
"""

import re

_FAULT_LINES = 'tests/test_fault_lines.py::'
_CLI = 'tests/test_cli.py::'
_FAULTS = 'tests/workdir/test_faults.py::'
_WRITES = 'tests/workdir/test_write_faults.py::'
_KEPT = 'tests/workdir/test_kept_steps.py::'
_INSPECT = 'tests/analysis/test_inspect.py::'
_TOOLKIT = 'tests/test_toolkit_cli.py::'

_MISTAKES = _FAULT_LINES + 'test_command_line_mistakes_are_one_line'
_CONFIG_ERRORS = _CLI + 'test_config_errors_are_one_line_and_touch_nothing'
_BROKEN_CONFIGS = _FAULTS + 'test_broken_config_files_are_one_line'
_NOT_PYTHON = _FAULT_LINES + 'test_a_config_file_that_is_not_python'
_SECTIONS = _FAULT_LINES + 'test_a_config_without_a_section_of_the_defaults'
_DERIVED = (
    _FAULT_LINES + 'test_a_field_is_named_before_the_fields_derived_from_it'
)
_SEED = _FAULTS + 'test_seed_out_of_range_is_refused'
_WRONG_KIND = _FAULT_LINES + 'test_paths_of_the_wrong_kind_are_named'
_LONG_LINES = _CLI + 'test_lines_longer_than_the_input_bound_are_refused'
_NOT_KEPT = _KEPT + 'test_a_step_not_kept_is_one_error_naming_the_kept_ones'
_BELOW = _FAULTS + 'test_num_steps_below_the_last_checkpoint'
_TRANSLATE_IO = (
    _FAULTS + 'test_translate_input_and_output_errors_come_before_decoding'
)
_SCORES = _TOOLKIT + 'test_scores_equal_the_loss_and_read_files_or_pairs'
_ENSEMBLE = _TOOLKIT + 'test_an_ensemble_of_copies_is_the_model'
_SET_ASIDE = (
    _FAULTS + 'test_damaged_checkpoints_are_set_aside_and_training_resumes'
)
_STALE_LOCK = (
    _FAULTS
    + 'test_eval_takes_over_a_stale_lock_and_falls_back_from_a_damaged_best'
)
_GARBAGE_LOCK = _FAULT_LINES + 'test_a_lock_file_holding_garbage_is_taken_over'
_RECORD_DIRS = _FAULT_LINES + 'test_a_record_file_that_is_a_directory'
_AVERAGED = _TOOLKIT + 'test_averaged_checkpoints_load_in_every_mode'
_SWEEP_ERRORS = _INSPECT + 'test_sweep_errors_are_one_line'
_GRID_VALUES = (
    _FAULT_LINES
    + 'test_a_grid_value_that_cannot_work_is_refused_before_any_run'
)
_BENCH_FLAGS = _FAULT_LINES + 'test_bench_flag_mistakes_are_one_line'
_SIGTERM = _FAULTS + 'test_sigterm_saves_a_checkpoint_and_resumes_exactly'

FOLDED = {
    # flags
    'flags.empty_workdir': _CLI + 'test_eval_output_and_empty_workdir_mistakes',
    'flags.positional_argument': _MISTAKES,
    'flags.distributed_timeout_zero': (
        _CLI + 'test_a_distributed_timeout_below_one_second_is_refused'
    ),
    'flags.config_field_unknown': _CONFIG_ERRORS,
    'flags.attention_kind_unknown': _CONFIG_ERRORS,
    # config files
    'config_file.missing': (
        _CLI + 'test_every_spelling_of_the_config_flag_is_checked_first'
    ),
    'config_file.empty': _BROKEN_CONFIGS,
    'config_file.not_python': _NOT_PYTHON,
    'config_file.json_file': _NOT_PYTHON,
    'config_file.syntax_error': _BROKEN_CONFIGS,
    'config_file.import_error': (
        _FAULTS
        + 'test_a_broken_config_file_ends_the_command_before_any_workdir'
    ),
    'config_file.no_get_config': _BROKEN_CONFIGS,
    'config_file.returns_dict': _BROKEN_CONFIGS,
    'config_file.raises': _BROKEN_CONFIGS,
    'config_file.returns_none': _BROKEN_CONFIGS,
    'config_file.no_data_section': _SECTIONS,
    'config_file.no_model_section': _SECTIONS,
    'config_file.no_model_attention_section': _SECTIONS,
    'config_file.no_train_section': _SECTIONS,
    'config_file.no_decode_section': _SECTIONS,
    'config_file.no_parallel_section': _SECTIONS,
    'config_file.preset_copy0': (
        _FAULT_LINES + 'test_a_zero_length_preset_is_refused_by_name'
    ),
    # config values (and every .nan and .inf: FOLDED_PATTERNS)
    'config.train.num_steps.huge': (
        _FAULT_LINES + 'test_counts_beyond_int32_are_refused'
    ),
    'config.data.max_length.zero': _DERIVED,
    'config.data.max_length.huge': _DERIVED,
    'config.model.attention.max_source_length.negative': _DERIVED,
    'config.model.attention.max_source_length.zero': _DERIVED,
    'config.model.hidden_size.zero': _CONFIG_ERRORS,
    'config.decode.beam_size.zero': _CONFIG_ERRORS,
    'config.train.batch_size.negative': _CONFIG_ERRORS,
    'config.model.attention.score.unknown_choice': _CONFIG_ERRORS,
    'config.seed.negative': _SEED,
    'config.seed.huge': _SEED,
    # rules
    'rules.keep_every_not_multiple': (
        _KEPT + 'test_keep_every_must_be_a_multiple_of_checkpoint_every'
    ),
    'rules.beam_wider_than_vocabulary': (
        _FAULTS + 'test_beam_wider_than_the_vocabulary_fails_before_training'
    ),
    'rules.compiler_option_unknown': _CONFIG_ERRORS,
    'rules.compiler_options_not_flags': _CONFIG_ERRORS,
    'rules.seed_huge': _SEED,
    'rules.init_from_missing': (
        _FAULTS + 'test_a_failed_init_from_leaves_no_workdir'
    ),
    'rules.profile_into_a_file': (
        _FAULT_LINES
        + 'test_a_file_where_a_profile_goes_is_refused_before_any_step'
    ),
    # modes
    'modes.eval': _CLI + 'test_eval_and_translate_modes',
    'modes.translate': (
        _CLI
        + 'test_translate_prints_only_translations_with_the_progress_bar_on'
    ),
    'modes.translate_blank_lines': (
        _CLI
        + 'test_translate_prints_only_translations_with_the_progress_bar_on'
    ),
    'modes.translate_to_file': _CLI + 'test_eval_and_translate_modes',
    'modes.translate_no_input': _CLI + 'test_translate_input_errors',
    'modes.translate_long_line': _LONG_LINES,
    'modes.translate_long_line_raised_limit': _LONG_LINES,
    'modes.score_long_line': _LONG_LINES,
    'modes.translate_unknown_token': (
        _FAULTS + 'test_translate_keeps_line_numbers_and_blank_lines'
    ),
    'modes.translate_input_missing': _TRANSLATE_IO,
    'modes.translate_output_folder_missing': _TRANSLATE_IO,
    'modes.translate_output_directory': _WRONG_KIND,
    'modes.translate_step_not_kept': _NOT_KEPT,
    'modes.eval_step_not_kept': _NOT_KEPT,
    'modes.eval_no_workdir': (
        _WRITES + 'test_a_mistyped_workdir_leaves_no_folders'
    ),
    'modes.translate_another_kind': (
        _FAULTS + 'test_another_kind_on_a_workdir_is_refused'
    ),
    'modes.train_another_size': (
        _CLI + 'test_checkpoint_of_another_config_is_refused'
    ),
    'modes.train_below_last_checkpoint': _BELOW,
    'modes.train_epochs_below_last_checkpoint': _BELOW,
    'modes.score_no_tab': _SCORES,
    'modes.score_files': _SCORES,
    'modes.translate_sigint_waiting': (
        _FAULTS + 'test_ctrl_c_in_translate_does_not_tell_to_resume'
    ),
    # ensembles
    'ensemble.translate_two_copies': _ENSEMBLE,
    'ensemble.eval_with_output': _ENSEMBLE,
    'ensemble.eval_without_output': _ENSEMBLE,
    # checkpoints
    'checkpoint.truncated_arrays.train': _SET_ASIDE,
    'checkpoint.flipped_byte.train': _SET_ASIDE,
    'checkpoint.missing_state_metadata.train': _SET_ASIDE,
    'checkpoint.missing_state.train': _SET_ASIDE,
    'checkpoint.missing_meta.train': _SET_ASIDE,
    'checkpoint.bad_meta_json.train': _SET_ASIDE,
    'checkpoint.bad_data_state.train': _SET_ASIDE,
    'checkpoint.empty_step_folder.train': _SET_ASIDE,
    'checkpoint.truncated_arrays.eval': _STALE_LOCK,
    'checkpoint.all_damaged.train': (
        _FAULTS + 'test_every_checkpoint_damaged_is_one_error'
    ),
    'checkpoint.folder_is_a_file': (
        _FAULTS + 'test_checkpoints_as_a_file_is_one_line'
    ),
    # workdirs
    'workdir.config_json_garbage.train': (
        _WRITES + 'test_a_broken_config_json_is_one_line'
    ),
    'workdir.config_json_a_list.train': (
        _WRITES + 'test_a_broken_config_json_is_one_line'
    ),
    'workdir.is_a_file.train': _WRONG_KIND,
    'workdir.lock_garbage.train': _GARBAGE_LOCK,
    'workdir.lock_empty_new.train': _GARBAGE_LOCK,
    'workdir.lock_dead_pid.eval': _STALE_LOCK,
    'workdir.lock_live_pid.train': _FAULTS + 'test_second_writer_is_refused',
    'workdir.lock_live_pid.eval': _FAULTS + 'test_second_writer_is_refused',
    'workdir.lock_is_a_directory.train': (
        _FAULT_LINES + 'test_a_directory_named_lock'
    ),
    'workdir.metrics_is_a_directory.train': _RECORD_DIRS,
    'workdir.eval_results_is_a_directory.eval': _RECORD_DIRS,
    # the text-corpus workdir
    'text.vocab_is_a_directory.translate': (
        _FAULT_LINES + 'test_a_vocabulary_path_that_is_a_directory'
    ),
    # corpora
    'corpus.bom_and_cr': (
        _FAULTS + 'test_cr_line_endings_and_a_bom_are_read_as_text'
    ),
    'corpus.dev_blank_lines': (
        _FAULTS + 'test_blank_dev_files_get_the_right_advice'
    ),
    'corpus.test_one_side': (
        _FAULTS + 'test_test_split_with_one_language_file_is_one_line'
    ),
    'corpus.train_source_is_a_directory': _WRONG_KIND,
    'corpus.prefix_in_missing_folder': (
        _FAULTS + 'test_failure_before_training_leaves_no_empty_workdir'
    ),
    # nmt_jax.average
    'average.last_two': _AVERAGED,
    'average.last_more_than_kept': _AVERAGED,
    'average.last_text': _MISTAKES,
    'average.no_output': _MISTAKES,
    'average.unknown_flag': _MISTAKES,
    'average.damaged_last': (
        _FAULTS + 'test_averaging_a_damaged_checkpoint_is_one_line'
    ),
    # nmt_jax.sweep
    'sweep.no_command': _MISTAKES,
    'sweep.unknown_command': _MISTAKES,
    'sweep.aggregate_root_missing': _MISTAKES,
    'sweep.run_without_grid': _SWEEP_ERRORS,
    'sweep.grid_without_values': _SWEEP_ERRORS,
    'sweep.grid_unknown_field': _SWEEP_ERRORS,
    'sweep.grid_bad_value': _GRID_VALUES,
    'sweep.grid_wrong_type': _GRID_VALUES,
    'sweep.set_unknown_field': _SWEEP_ERRORS,
    'sweep.shard_out_of_range': _SWEEP_ERRORS,
    'sweep.config_missing': _SWEEP_ERRORS,
    'sweep.dry_run': _INSPECT + 'test_grid_dry_run_and_shards',
    'sweep.aggregate_no_workdirs': _SWEEP_ERRORS,
    'sweep.tau_not_flexible': _SWEEP_ERRORS,
    'sweep.tau_workdir_missing': _SWEEP_ERRORS,
    # benchmarks.bench
    'bench.config_missing': _BENCH_FLAGS,
    'bench.threads_negative': _BENCH_FLAGS,
    'bench.compare_missing': _BENCH_FLAGS,
    'bench.unknown_command': _MISTAKES,
    # signals
    'signals.sigterm_then_resume': _SIGTERM,
    'signals.sigterm_during_saves': _SIGTERM,
}

# Cases by name pattern (re.fullmatch): NaN and infinity in each float field.
FOLDED_PATTERNS = {
    r'config\..+\.(nan|inf)': (
        _FAULTS + 'test_nan_and_inf_are_refused_in_every_float_field'
    ),
}


def folded_into(name):
  """The test that checks case `name`'s fault, or None: the case runs."""
  if name in FOLDED:
    return FOLDED[name]
  for pattern, test in FOLDED_PATTERNS.items():
    if re.fullmatch(pattern, name):
      return test
  return None


def without(cases):
  """`cases` but those another test checks."""
  return [case for case in cases if folded_into(case.name) is None]
